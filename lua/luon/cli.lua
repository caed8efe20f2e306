-- luon.cli: the command-line options of luon's programs (scripts/,
-- examples/), one way for all of them:
--   local opt, usage = cli.options(arg, defaults, usage_text, {positive = {"epochs", ...}})
-- Options are --name value or --name=value; a name's dashes are
-- underscores in opt (--batch-size -> opt.batch_size). Each default's type
-- is its option's: a number default takes numbers only. The names listed in
-- `positive` must be integers >= 1. -h or --help prints the usage text and
-- exits 0; an unknown option, a missing value or a wrong one prints what is
-- wrong, then the usage text, and exits 2. usage(msg) does the same for the
-- program's own checks.
local cli = {}

function cli.options(argv, defaults, text, checks)
  local function usage(msg)
    io.stderr:write((msg and (msg .. "\n") or "") .. text .. "\n")
    os.exit(msg and 2 or 0)
  end
  local opt = {}
  for k, v in pairs(defaults) do opt[k] = v end
  local a, i = argv or {}, 1
  while i <= #a do
    local k = a[i]
    if k == "-h" or k == "--help" then usage() end
    local name, val = k:match("^%-%-([%w%-]+)=(.*)$")
    if not name then
      name = k:match("^%-%-([%w%-]+)$")
      if not name then usage("unexpected argument: " .. k) end
      i = i + 1
      val = a[i]
      if val == nil then usage("--" .. name .. " needs a value") end
    end
    local key = name:gsub("%-", "_")
    if opt[key] == nil then usage("unknown option --" .. name) end
    if type(defaults[key]) == "number" then
      local v = tonumber(val)
      if not v then usage(("--%s expects a number, got %s"):format(name, val)) end
      val = v
    end
    opt[key] = val
    i = i + 1
  end
  for _, k in ipairs(checks and checks.positive or {}) do
    if opt[k] < 1 or opt[k] % 1 ~= 0 then
      usage(("--%s must be a positive integer, got %s"):format((k:gsub("_", "-")), opt[k]))
    end
  end
  return opt, usage
end

return cli
