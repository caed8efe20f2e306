-- luon.ndarray_print: arrays as text, as NumPy's str() shows them (its
-- arrayprint rules, floatmode 'maxprec'), and np.set_printoptions. Printing
-- is not on any hot path: only the printed values come to the host.
local core = require("luon.core")
local np = require("luon.np")
local C = core.C

local M = {}

-- NumPy's defaults (np.get_printoptions()); set_printoptions changes them.
local opts = {precision = 8, threshold = 1000, edgeitems = 3, suppress = false, linewidth = 75}
local opt_names = {"precision", "threshold", "edgeitems", "suppress", "linewidth"}

-- np.set_printoptions{precision=, threshold=, edgeitems=, suppress=, linewidth=}:
-- the given options change, the others stay (as in NumPy).
function M.set_printoptions(kw)
  kw = core.options(kw, "set_printoptions", opt_names)
  local new = {}
  for _, k in ipairs({"precision", "threshold", "edgeitems", "linewidth"}) do
    if kw[k] ~= nil then new[k] = core.int_arg(kw[k], "set_printoptions", k, 0) end
  end
  if kw.suppress ~= nil then
    if type(kw.suppress) ~= "boolean" then
      core.error(("set_printoptions: suppress must be true or false, got %s"):format(core.show_value(kw.suppress)))
    end
    new.suppress = kw.suppress
  end
  for k, v in pairs(new) do opts[k] = v end
end

-- A copy of the current options.
function M.get_printoptions()
  local t = {}
  for k, v in pairs(opts) do t[k] = v end
  return t
end

---------------------------------------------------------------------------
-- Shortest digits: the fewest significant digits that read back as the
-- same value of the array's dtype (NumPy's "unique" Dragon4 mode).

-- Mantissa bits (with the implicit one) and smallest normal exponent of the
-- float dtypes narrower than float64.
local narrow = {[core.FLOAT32] = {24, -126}, [core.dtype_ids.float16] = {11, -14},
                [core.dtype_ids.bfloat16] = {8, -126}}

-- Whether the double d rounds (to nearest even) to v, a value of a float
-- type with p mantissa bits and smallest normal exponent emin.
local function rounds_to(d, v, p, emin)
  if d == v then return true end
  local av = math.abs(v)
  local _, e = math.frexp(av)
  e = math.max(e - 1, emin)  -- av in [2^e, 2^(e+1)), or subnormal
  local ulp = 2 ^ (e - p + 1)
  local diff = (d - v) * (v < 0 and -1 or 1) -- > 0: away from zero
  local half = ulp / 2
  if diff < 0 and av == 2 ^ e and e > emin then half = ulp / 4 end -- spacing halves below 2^e
  if math.abs(diff) < half then return true end
  return math.abs(diff) == half and (av / ulp) % 2 == 0
end

-- v's shortest round-trip form as "%e" prints it: "-1.25e-05".
local function shortest(v, bits)
  for n = 0, 16 do
    local s = ("%." .. n .. "e"):format(v)
    local d = tonumber(s)
    if d == v or (bits and rounds_to(d, v, bits[1], bits[2])) then return s end
  end
  return ("%.16e"):format(v)
end

-- Split "%e" text into sign+integer digit, fraction digits (trailing zeros
-- dropped) and exponent.
local function split_e(s)
  local int, frac, exp = s:match("^(-?%d)%.?(%d*)e([-+]%d+)$")
  return int, (frac:gsub("0+$", "")), tonumber(exp)
end

-- v in positional notation, unique digits but at most prec after the point:
-- integer part, fraction part (trailing zeros dropped).
local function positional(v, bits, prec)
  local int, frac, exp = split_e(shortest(v, bits))
  local sign = int:sub(1, 1) == "-" and "-" or ""
  local digits = int:gsub("^-", "") .. frac
  local ip, fp
  if exp >= 0 then
    if #digits <= exp + 1 then
      ip, fp = digits .. ("0"):rep(exp + 1 - #digits), ""
    else
      ip, fp = digits:sub(1, exp + 1), digits:sub(exp + 2)
    end
  else
    ip, fp = "0", ("0"):rep(-exp - 1) .. digits
  end
  if #fp > prec then
    ip, fp = ("%." .. prec .. "f"):format(v):match("^(-?%d+)%.?(%d*)$")
    fp = fp:gsub("0+$", "")
    return ip, fp
  end
  return sign .. ip, fp
end

-- v in scientific notation, unique digits but at most prec after the point.
local function scientific(v, bits, prec)
  local int, frac, exp = split_e(shortest(v, bits))
  if #frac > prec then int, frac, exp = split_e(("%." .. prec .. "e"):format(v)) end
  return int, frac, exp
end

local function exp_text(exp, size)
  local digits = tostring(math.abs(exp))
  return "e" .. (exp < 0 and "-" or "+") .. ("0"):rep(size - #digits) .. digits
end

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

local function nonfinite_text(v)
  if v ~= v then return "nan" end
  return v > 0 and "inf" or "-inf"
end

-- NumPy's FloatingFormat: one format for all values of the array, chosen
-- from its finite ones; returns the function that formats one value.
local function float_formatter(buf, n, bits)
  local p = opts.precision
  local maxv, minv, nfinite, neginf = 0, math.huge, 0, false
  for k = 0, n - 1 do
    local v = buf[k]
    if finite(v) then
      nfinite = nfinite + 1
      local av = math.abs(v)
      if av ~= 0 then
        if av > maxv then maxv = av end
        if av < minv then minv = av end
      end
    elseif v == -math.huge then
      neginf = true
    end
  end
  local sci = maxv > 0 and (maxv >= 1e8 or (not opts.suppress and (minv < 1e-4 or maxv / minv > 1000)))
  local pad_left, pad_right, exp_size = 0, 0, 0
  if nfinite > 0 then
    for k = 0, n - 1 do
      local v = buf[k]
      if finite(v) then
        local ip, fp, exp
        if sci then
          ip, fp, exp = scientific(v, bits, p)
          exp_size = math.max(exp_size, #tostring(math.abs(exp)), 2)
        else
          ip, fp = positional(v, bits, p)
        end
        pad_left, pad_right = math.max(pad_left, #ip), math.max(pad_right, #fp)
      end
    end
  end
  local prec = pad_right -- the fraction digits every value shows in scientific mode
  if sci then pad_right = exp_size + 2 + prec end
  if nfinite < n then -- room for "nan", "inf", "-inf"
    pad_left = math.max(pad_left, 3 - (pad_right + 1), (neginf and 4 or 3) - (pad_right + 1))
  end
  local width = pad_left + pad_right + 1
  return function(v)
    if not finite(v) then
      local s = nonfinite_text(v)
      return (" "):rep(width - #s) .. s
    end
    if sci then
      local ip, fp, exp = scientific(v, bits, p)
      return (" "):rep(pad_left - #ip) .. ip .. "." .. fp .. ("0"):rep(prec - #fp) .. exp_text(exp, exp_size)
    end
    local ip, fp = positional(v, bits, p)
    return (" "):rep(pad_left - #ip) .. ip .. "." .. fp .. (" "):rep(pad_right - #fp)
  end
end

-- A 0-d float array, as NumPy shows a float scalar: "1.0", "0.1", "1e-05".
local function float_scalar(v, bits)
  if not finite(v) then return nonfinite_text(v) end
  local av = math.abs(v)
  if av == 0 or (av >= 1e-4 and av < 1e16) then
    local ip, fp = positional(v, bits, 17)
    return ip .. "." .. (fp == "" and "0" or fp)
  end
  local int, frac, exp = scientific(v, bits, 17)
  return int .. (frac == "" and "" or "." .. frac) .. exp_text(exp, 2)
end

---------------------------------------------------------------------------
-- Layout: NumPy's _formatArray (str(), so separator " " and no prefix)

-- Past threshold elements only the first and last edgeitems entries of
-- each longer axis are shown: those are taken on the device first (longest
-- axis first, so no step grows), and only they come to the host.
local function edges(x, shape, e)
  local axes = {}
  for d = 1, #shape do if shape[d] > 2 * e then axes[#axes + 1] = d end end
  table.sort(axes, function(a, b) return shape[a] > shape[b] end)
  for _, d in ipairs(axes) do
    local len, idx = shape[d], {}
    for k = 0, e - 1 do idx[#idx + 1] = k end
    for k = len - e, len - 1 do idx[#idx + 1] = k end
    x = np.take(x, idx, d - 1)
  end
  return x
end

-- Add word to the line being built, first starting a new line (with the
-- hanging indent) if it would pass width.
local function extend(s, line, word, width, hanging)
  if #line + #word > width and #line > #hanging then
    s = s .. line:gsub("%s+$", "") .. "\n"
    line = hanging
  end
  return s, line .. word
end

local function layout(strs, shape, summarised, e)
  local nd = #shape
  local strides, acc = {}, 1
  for d = nd, 1, -1 do strides[d] = acc; acc = acc * shape[d] end
  local function render(d, base, hanging, width)
    local len = shape[d]
    local lead, trail = 0, len
    if summarised[d] then lead, trail = e, e end
    local function child(i)
      if d == nd then return strs[base + i] end
      return render(d + 1, base + i * strides[d], hanging .. " ", width - 1)
    end
    local s = ""
    if d == nd then
      local elem_width, line = width - 1, hanging
      for i = 0, lead - 1 do
        s, line = extend(s, line, child(i), elem_width, hanging)
        line = line .. " "
      end
      if summarised[d] then
        s, line = extend(s, line, "...", elem_width, hanging)
        line = line .. " "
      end
      for i = len - trail, len - 2 do
        s, line = extend(s, line, child(i), elem_width, hanging)
        line = line .. " "
      end
      s, line = extend(s, line, child(len - 1), elem_width, hanging)
      s = s .. line
    else
      local sep = ("\n"):rep(nd - d)
      for i = 0, lead - 1 do s = s .. hanging .. child(i) .. sep end
      if summarised[d] then s = s .. hanging .. "..." .. sep end
      for i = len - trail, len - 2 do s = s .. hanging .. child(i) .. sep end
      s = s .. hanging .. child(len - 1)
    end
    return "[" .. s:sub(#hanging + 1) .. "]"
  end
  return render(1, 0, " ", opts.linewidth)
end

---------------------------------------------------------------------------

-- The text of array x: its values as NumPy's str() shows them, then
-- " @gpu(0)" for every device but cpu(0).
function M.tostring(x)
  local info = core.info_of(x)
  local dtype, ndim, size = info.dtype, info.ndim, tonumber(info.size)
  local on_cpu0 = info.dev_type == C.LUON_CPU and info.dev_id == 0
  local dev = core.device_from_ids(info.dev_type, info.dev_id)
  local shape = x.shape
  if size == 0 then return "[]" .. (on_cpu0 and "" or " @" .. tostring(dev)) end
  local e = opts.edgeitems
  local summarised, shown = {}, x
  if size > opts.threshold then
    for d = 1, ndim do summarised[d] = shape[d] > 2 * e end
    local was = C.luon_autograd_set_recording(0) -- printing is no part of a graph
    local ok, r = pcall(edges, x, shape, e)
    C.luon_autograd_set_recording(was)
    if not ok then error(r, 0) end
    shown = r
  end
  local buf, n = core.host_values(shown)
  local bits = narrow[dtype]
  local is_float = core.is_float(dtype)
  if ndim == 0 then
    local v = buf[0]
    if dtype == core.BOOL then return v ~= 0 and "True" or "False" end
    if is_float then return float_scalar(v, bits) end
    return (tostring(v):gsub("LL$", ""))
  end
  local strs = {}
  if dtype == core.BOOL then
    for k = 0, n - 1 do strs[k] = buf[k] ~= 0 and " True" or "False" end
  elseif is_float then
    local f = float_formatter(buf, n, bits)
    for k = 0, n - 1 do strs[k] = f(buf[k]) end
  else
    local width = 0
    for k = 0, n - 1 do
      strs[k] = tostring(buf[k]):gsub("LL$", "")
      width = math.max(width, #strs[k])
    end
    for k = 0, n - 1 do strs[k] = (" "):rep(width - #strs[k]) .. strs[k] end
  end
  local s = layout(strs, shown.shape, summarised, e)
  if not on_cpu0 then s = s .. " @" .. tostring(dev) end
  return s
end

return M
