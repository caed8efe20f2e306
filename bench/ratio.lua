-- Print luon/peer ratios for two "name size value" listings (args 1 and 2).
local function parse(text)
  local t = {}
  for name, size, v in text:gmatch("(%S+) (%d+) ([%d.]+)") do t[tonumber(size)] = {name, tonumber(v)} end
  return t
end
local a, b = parse(arg[1]), parse(arg[2])
for size, la in pairs(a) do
  local pb = b[size]
  if pb then
    print(("   size %d: %s %.3f us, %s %.3f us -> %s is %.2fx faster"):format(
      size, la[1], la[2], pb[1], pb[2], la[1], pb[2] / la[2]))
  end
end
