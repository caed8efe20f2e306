-- luon.gluon.trainer_states: Trainer:save_states / load_states (trainer.lua
-- calls these). One safetensors file, written atomically as
-- save_parameters' (luon.serialize): the optimizer's per-parameter states
-- as arrays, and a JSON text (the uint8 array "__luon_trainer__") with the
-- optimizer's class and scalar fields (learning rate, num_update, ...), its
-- lr_scheduler's position, the per-index update counts, luon.amp's loss
-- scaler and the layout of each state. Not the weights (save_parameters).
local core = require("luon.core")
local np = require("luon.np")
local serialize = require("luon.serialize")

local M = {}

local META = "__luon_trainer__"
local FORMAT = 1

---------------------------------------------------------------------------
-- A small JSON: numbers (17 digits, so they come back bit for bit; inf and
-- NaN as Python's json writes them), strings, booleans, lists, objects.

local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function encode(v, out)
  local tv = type(v)
  if tv == "number" then
    if v ~= v then out[#out + 1] = "NaN"
    elseif v == math.huge then out[#out + 1] = "Infinity"
    elseif v == -math.huge then out[#out + 1] = "-Infinity"
    elseif v % 1 == 0 and math.abs(v) < 2^53 and 1 / v > 0 then out[#out + 1] = ("%d"):format(v)
    else out[#out + 1] = ("%.17g"):format(v) end
  elseif tv == "string" then
    out[#out + 1] = '"' .. v:gsub('[%c"\\]', function(c) return ("\\u%04x"):format(c:byte()) end) .. '"'
  elseif tv == "boolean" then
    out[#out + 1] = tostring(v)
  elseif tv == "table" and is_list(v) and (#v > 0 or next(v) == nil) then
    out[#out + 1] = "["
    for k = 1, #v do
      if k > 1 then out[#out + 1] = "," end
      encode(v[k], out)
    end
    out[#out + 1] = "]"
  elseif tv == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    out[#out + 1] = "{"
    for i, k in ipairs(keys) do
      if i > 1 then out[#out + 1] = "," end
      encode(k, out)
      out[#out + 1] = ":"
      local x = v[k]
      if x == nil then x = v[tonumber(k)] end
      encode(x, out)
    end
    out[#out + 1] = "}"
  end
end

local function to_json(v)
  local out = {}
  encode(v, out)
  return table.concat(out)
end

-- Parse the JSON text s; errors are "<what>" strings for the caller to name.
local function from_json(s)
  local pos = 1
  local function fail(what) error({json = ("%s at byte %d"):format(what, pos)}) end
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local words = {["true"] = true, ["false"] = false, NaN = 0 / 0, Infinity = math.huge,
                 ["-Infinity"] = -math.huge}
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local t = {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1 return t end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then fail("expected a key") end
        local k = value()
        ws()
        if s:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        t[k] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return t end
        if d ~= "," then fail("expected ',' or '}'") end
      end
    elseif c == "[" then
      local t = {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1 return t end
      while true do
        t[#t + 1] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return t end
        if d ~= "," then fail("expected ',' or ']'") end
      end
    elseif c == '"' then
      local out, i = {}, pos + 1
      while true do
        local j = s:find('["\\]', i)
        if not j then fail("unterminated string") end
        out[#out + 1] = s:sub(i, j - 1)
        if s:sub(j, j) == '"' then pos = j + 1 break end
        local e = s:sub(j + 1, j + 1)
        if e == "u" then
          local code = tonumber(s:sub(j + 2, j + 5), 16)
          if not code or code > 255 then fail("unsupported escape") end
          out[#out + 1] = string.char(code)
          i = j + 6
        else
          local map = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", n = "\n", t = "\t", r = "\r", b = "\b", f = "\f"}
          if not map[e] then fail("bad escape") end
          out[#out + 1] = map[e]
          i = j + 2
        end
      end
      return table.concat(out)
    end
    for w, v in pairs(words) do
      if s:sub(pos, pos + #w - 1) == w then pos = pos + #w return v end
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if num and tonumber(num) then pos = pos + #num return tonumber(num) end
    fail("unexpected character")
  end
  local v = value()
  ws()
  if pos <= #s then fail("trailing characters") end
  return v
end

---------------------------------------------------------------------------
-- States: whatever create_state returned (nil, an array, a list or a table
-- of them, nested, numbers, booleans, strings), as a layout and the arrays
-- in it. Layout: an array is {a = "<tensor name>"}, a string {s = "..."},
-- a list a JSON list, a table with string keys {t = {...}}; numbers and
-- booleans stand for themselves.

local function state_layout(v, name, arrays, where)
  if core.is_array(v) then
    arrays[#arrays + 1] = {name = name, array = v}
    return {a = name}
  end
  local tv = type(v)
  if tv == "number" or tv == "boolean" then return v end
  if tv == "string" then return {s = v} end
  if tv == "table" and getmetatable(v) == nil then
    if is_list(v) and #v > 0 then
      local l = {}
      for k = 1, #v do l[k] = state_layout(v[k], name .. "." .. k, arrays, where) end
      return l
    end
    local t = {}
    for k, x in pairs(v) do
      if type(k) ~= "string" then
        core.error(("Trainer.save_states: the state of %s is a table with key %s; a state table " ..
                    "is a list or has string keys"):format(where, core.show_value(k)))
      end
      t[k] = state_layout(x, name .. "." .. k, arrays, where)
    end
    return {t = t}
  end
  core.error(("Trainer.save_states: the state of %s holds %s; states are arrays, numbers, booleans, " ..
              "strings and tables of them"):format(where, core.show_value(v)))
end

-- The state from its layout, its arrays copied to dev (arrays: name -> array).
local function state_from(l, arrays, dev, where)
  local tl = type(l)
  if tl == "number" or tl == "boolean" then return l end
  if tl ~= "table" then error({json = "a state's layout is broken at " .. where}) end
  if l.a ~= nil then
    local x = arrays[l.a]
    if x == nil then error({json = ("array '%s' of %s is missing"):format(tostring(l.a), where)}) end
    return x:copyto(dev)
  end
  if l.s ~= nil then return l.s end
  if l.t ~= nil then
    local t = {}
    for k, x in pairs(l.t) do t[k] = state_from(x, arrays, dev, where) end
    return t
  end
  local t = {}
  for k = 1, #l do t[k] = state_from(l[k], arrays, dev, where) end
  return t
end

---------------------------------------------------------------------------
-- The scalar fields of a table (an optimizer, a scheduler, the loss
-- scaler): numbers, booleans, strings and lists of numbers, by name.

local function scalars(t)
  local out = {}
  for k, v in pairs(t) do
    local tv = type(v)
    if type(k) == "string" and (tv == "number" or tv == "boolean" or tv == "string") then
      out[k] = v
    elseif type(k) == "string" and tv == "table" and getmetatable(v) == nil and #v > 0 and is_list(v) then
      local nums = true
      for _, x in ipairs(v) do nums = nums and type(x) == "number" end
      if nums then out[k] = {unpack(v)} end
    end
  end
  return out
end

local function set_scalars(t, fields)
  for k, v in pairs(fields) do rawset(t, k, v) end
end

local function class_name(x) return getmetatable(x).__name end

---------------------------------------------------------------------------
-- save(trainer, path)

local function param_entry(p)
  local data = p._data or p:list_data()
  return {name = tostring(p.name), shape = data[1].shape}
end

function M.save(tr, path)
  core.path_arg(path, "Trainer.save_states")
  local opt = tr._optimizer
  local updater = tr._updaters[1]
  local arrays, layouts, stateless, params = {}, {}, {}, {}
  for i, p in ipairs(tr._params) do
    params[i] = p._data and param_entry(p) or {name = tostring(p.name)}
    if updater and updater.stateless[i] then stateless[#stateless + 1] = i end
    local s = updater and updater.states[i]
    if s ~= nil then
      layouts[tostring(i)] = state_layout(s, "state." .. i, arrays, ("Parameter '%s'"):format(tostring(p.name)))
    end
  end
  local counts = {}
  local own = updater and opt._all_index_update_counts[updater.key] or opt._index_update_count
  for idx, c in pairs(own) do counts[tostring(idx)] = c end
  local sched = opt.lr_scheduler
  local meta = {
    format = FORMAT,
    optimizer = class_name(opt),
    fields = scalars(opt),
    counts = counts,
    scheduler = type(sched) == "table" and {class = class_name(sched), fields = scalars(sched)} or nil,
    amp = rawget(tr, "_amp") and scalars(tr._amp) or nil,
    params = params,
    states = layouts,
    stateless = stateless,
  }
  local bytes = to_json(meta)
  local codes = {bytes:byte(1, -1)}
  arrays[#arrays + 1] = {name = META, array = np.array(codes, {dtype = "uint8"})}
  serialize.save(path, arrays, {caller = "Trainer.save_states"})
end

---------------------------------------------------------------------------
-- load(trainer, path): everything is read and checked before anything of
-- the trainer changes.

local function shape_text(s) return s and core.shape_text(s) or "(not initialized)" end

local function read_meta(arr, path)
  local codes = arr:totable()
  local parts = {}
  for k = 1, #codes, 4096 do parts[#parts + 1] = string.char(unpack(codes, k, math.min(k + 4095, #codes))) end
  local ok, meta = pcall(from_json, table.concat(parts))
  if not ok then
    core.error(("Trainer.load_states: %s: its metadata is not valid JSON (%s)")
               :format(path, type(meta) == "table" and meta.json or tostring(meta)))
  end
  return meta
end

function M.load(tr, path)
  core.path_arg(path, "Trainer.load_states")
  local entries = serialize.load(path, {caller = "Trainer.load_states"})
  local arrays, meta = {}, nil
  for _, e in ipairs(entries) do
    if e.name == META then meta = e.array else arrays[e.name] = e.array end
  end
  if meta == nil then
    core.error(("Trainer.load_states: %s holds no trainer states (no '%s'); was it written by " ..
                "save_parameters?"):format(path, META))
  end
  meta = read_meta(meta, path)
  if type(meta) ~= "table" or meta.format ~= FORMAT or type(meta.params) ~= "table"
     or type(meta.states) ~= "table" or type(meta.fields) ~= "table" then
    core.error(("Trainer.load_states: %s: unknown trainer-states format (expected format %d)"):format(path, FORMAT))
  end
  local opt = tr._optimizer
  if meta.optimizer ~= class_name(opt) then
    core.error(("Trainer.load_states: %s holds the states of optimizer %s, but this Trainer's is %s")
               :format(path, tostring(meta.optimizer), class_name(opt)))
  end
  local params = tr._params
  if #meta.params ~= #params then
    core.error(("Trainer.load_states: %s was saved for %d parameters, but this Trainer has %d")
               :format(path, #meta.params, #params))
  end
  for i, p in ipairs(params) do
    local want, here = meta.params[i], p._data and param_entry(p) or {name = tostring(p.name)}
    if want.shape and here.shape and not core.same_shape(want.shape, here.shape) then
      core.error(("Trainer.load_states: %s: parameter %d is '%s' of shape %s in the file, but '%s' " ..
                  "of shape %s here"):format(path, i, tostring(want.name), shape_text(want.shape),
                                              here.name, shape_text(here.shape)))
    end
  end
  local sched = opt.lr_scheduler
  local sched_class = type(sched) == "table" and class_name(sched) or nil
  local saved_class = meta.scheduler and meta.scheduler.class
  if sched_class ~= saved_class then
    core.error(("Trainer.load_states: %s was saved with lr_scheduler %s, but this Trainer's optimizer has %s")
               :format(path, tostring(saved_class or "none"), tostring(sched_class or "none")))
  end
  if meta.amp and not rawget(tr, "_amp") then
    core.error(("Trainer.load_states: %s holds luon.amp's loss scaler; call amp.init_trainer(trainer) " ..
                "before load_states"):format(path))
  end
  -- the states on every device (one copy in the file)
  local per_dev = {}
  for d, dev in ipairs(tr._devices) do
    local states = {}
    for key, l in pairs(meta.states) do
      local i = tonumber(key)
      if not i or params[i] == nil then
        core.error(("Trainer.load_states: %s: a state for parameter %s, which this Trainer lacks"):format(path, key))
      end
      local ok, s = pcall(state_from, l, arrays, dev, ("parameter %d ('%s')"):format(i, tostring(params[i].name)))
      if not ok then
        core.error(("Trainer.load_states: %s: %s"):format(path, type(s) == "table" and s.json or tostring(s)))
      end
      states[i] = s
    end
    per_dev[d] = states
  end
  -- now change the trainer
  set_scalars(opt, meta.fields)
  if sched_class then set_scalars(sched, meta.scheduler.fields) end
  local counts = {}
  for k, c in pairs(meta.counts or {}) do counts[tonumber(k)] = c end
  local all = {[0] = counts}
  for d, u in ipairs(tr._updaters) do
    local stateless = {}
    for _, i in ipairs(meta.stateless or {}) do stateless[i] = true end
    u.states, u.stateless = per_dev[d], stateless
    local c = {}
    for k, v in pairs(counts) do c[k] = v end
    all[u.key] = c
  end
  rawset(opt, "_all_index_update_counts", all)
  rawset(opt, "_index_update_count", tr._updaters[1] and all[tr._updaters[1].key] or counts)
  if meta.amp then set_scalars(tr._amp, meta.amp) end
end

return M
