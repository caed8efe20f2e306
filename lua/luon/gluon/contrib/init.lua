-- luon.gluon.contrib: MXNet 1.x's gluon.contrib namespace; nn (its layers).
local core = require("luon.core")

return core.strict_module({}, "gluon.contrib", {
  nn = function() return require("luon.gluon.contrib.nn") end,
})
