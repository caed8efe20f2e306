-- luon.gluon.data.object: the objects of gluon.data (datasets, samplers,
-- loaders) as userdata proxies over a table of fields, because LuaJIT (Lua
-- 5.1 semantics) ignores __len on tables. For an object o of a class with
-- len / get / iter: #o is o:len(), o[i] (any key but a string) is o:get(i),
-- and `for a, b in o do` runs one pass of o:iter(); ipairs(o) and pairs(o)
-- are errors (o is not a table). Fields read and write through to the table.
local core = require("luon.core")
local ffi, bit = core.ffi, require("bit")

local M = {}

-- The metatable field that holds an object's class (a string: it must
-- survive a second load of this module, as busted's insulation makes).
local class_key = "__class"

-- A class: a table of methods whose metatable chains to base's.
function M.class(base, name)
  local cls = {__name = name}
  if base then setmetatable(cls, {__index = base}) end
  return cls
end

-- The class of object o, nil when o is not an object of this module.
function M.class_of(o)
  if type(o) ~= "userdata" then return nil end
  local mt = getmetatable(o)
  return type(mt) == "table" and rawget(mt, class_key) or nil
end

-- Whether cls is base or derives from it.
function M.derives(cls, base)
  while cls do
    if cls == base then return true end
    local mt = getmetatable(cls)
    cls = mt and mt.__index
  end
  return false
end

local function name_of(cls)
  while cls do
    local n = rawget(cls, "__name")
    if n then return n end
    local mt = getmetatable(cls)
    cls = mt and mt.__index
  end
  return "object"
end
M.name_of = name_of

local fields_mt = setmetatable({}, {__mode = "k"}) -- class -> metatable of its field tables

-- A new object of cls whose fields are the table t (taken over).
function M.new(cls, t)
  local fmt = fields_mt[cls]
  if not fmt then
    fmt = {__index = cls}
    fields_mt[cls] = fmt
  end
  setmetatable(t, fmt)
  local o = newproxy(true)
  local mt = getmetatable(o)
  mt[class_key] = cls
  mt.__index = function(_, k)
    local v = t[k]
    if v == nil and type(k) ~= "string" then return o:get(k) end
    return v
  end
  mt.__newindex = t
  mt.__len = function() return o:len() end
  mt.__tostring = function()
    local f = cls.__tostring
    if f then return f(o) end
    local ok, n = pcall(o.len, o)
    return ok and ("%s(%s)"):format(name_of(cls), tostring(n)) or name_of(cls)
  end
  -- The generic for: a call with no control value starts a pass of
  -- o:iter(); later calls continue it. One pass is live per object: the
  -- values of an abandoned one (a newer loop started) make an error.
  local it, last
  local function keep(v, ...)
    last = v
    if v == nil then it = nil end
    return v, ...
  end
  mt.__call = function(_, _, ctrl)
    if ctrl == nil then
      it = o:iter()
    elseif it == nil or not rawequal(ctrl, last) then
      local n = name_of(cls)
      core.error(("%s: this loop over it was abandoned when a newer loop over the same %s started; " ..
                  "for nested loops over one %s, write the inner one as `for ... in obj:iter() do`")
                 :format(n, n, n))
    end
    return keep(it())
  end
  return o
end

-- A read-only 0-based view of a Lua list, as Python's list: v[i] for
-- i in 0..#v-1 (negative i counts from the end), #v, `for x in v do`,
-- v:totable() a Lua list copy; any other index is an error naming it.
local List0 = M.class(nil, "list")
M.List0 = List0

function M.list0(list, what)
  return M.new(List0, {_list = list, _what = what})
end
function List0:len() return #self._list end
function List0:get(i)
  local n = #self._list
  if type(i) ~= "number" or i % 1 ~= 0 or i < -n or i >= n then
    core.error(("%s: index %s is out of range for %d entries (0-based, as MXNet's list: 0..%d, or -%d..-1 from the end)")
               :format(self._what, core.show_value(i), n, n - 1, n))
  end
  if i < 0 then i = i + n end
  return self._list[i + 1]
end
function List0:iter()
  local list, k = self._list, 0
  return function()
    k = k + 1
    return list[k]
  end
end
function List0:totable()
  local out = {}
  for k, v in ipairs(self._list) do out[k] = v end
  return out
end
function List0:__tostring()
  local parts = {}
  for k, v in ipairs(self._list) do parts[k] = ("%q"):format(tostring(v)) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

-- A small seeded generator (splitmix64) for the samplers' shuffles:
-- rng(seed) returns a function of n giving uniform integers in [0, n).
function M.rng(seed)
  local s = ffi.new("uint64_t[1]", seed)
  return function(n)
    s[0] = s[0] + 0x9E3779B97F4A7C15ULL
    local z = s[0]
    z = bit.bxor(z, bit.rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
    z = bit.bxor(z, bit.rshift(z, 27)) * 0x94D049BB133111EBULL
    z = bit.bxor(z, bit.rshift(z, 31))
    return tonumber(z % n)
  end
end

-- The helpers the modules of gluon.data share.

function M.argerror(fmt, ...) core.error(fmt:format(...)) end

-- Fields of an item as arguments: a plain Lua list is a tuple of fields.
function M.is_tuple(item)
  return type(item) == "table" and getmetatable(item) == nil
end

-- The results of a transform as an item: several values make a list.
function M.pack(...)
  if select("#", ...) == 1 then return (...) end
  return {...}
end

-- Index i of a dataset of n items as 0..n-1: -n..-1 count from the end,
-- as MXNet's (NumPy's) indexing; anything else is an error.
function M.check_index(i, n)
  if type(i) ~= "number" or i % 1 ~= 0 or i < -n or i >= n then
    M.argerror("dataset index %s is out of range for a dataset of length %d (indices are 0-based: " ..
             "0..%d, or -%d..-1 from the end)", core.show_value(i), n, n - 1, n)
  end
  if i < 0 then return i + n end
  return i
end

-- Whether x can be a dataset, sampler or batch sampler: an object of this
-- module or a table with the methods.
function M.indexable(x)
  return type(x) == "table" or M.class_of(x) ~= nil
end

-- An item as its fields: a plain Lua list as its entries, anything else as
-- itself (for data, label in ds do ...).
function M.fields(item)
  if M.is_tuple(item) and #item > 0 then return unpack(item) end
  return item
end

-- A seed for a sampler given none: drawn from np.random, so that
-- np.random.seed makes the orders repeatable.
function M.fresh_seed()
  local s = require("luon.np").random.randint(0, 2 ^ 31, {size = {2}, dtype = "int64"}):totable()
  return s[1] * 2 ^ 31 + s[2]
end

-- Shuffle the list p in place (Fisher-Yates) with rand, an rng's function.
function M.shuffle(p, rand)
  for i = #p, 2, -1 do
    local j = rand(i) + 1
    p[i], p[j] = p[j], p[i]
  end
  return p
end

return M
