-- luon.gluon.contrib: MXNet 1.x's gluon.contrib namespace; nn (its layers)
-- and estimator (the fit loop and its event handlers).
local core = require("luon.core")

return core.strict_module({}, "gluon.contrib", {
  nn = function() return require("luon.gluon.contrib.nn") end,
  estimator = function() return require("luon.gluon.contrib.estimator") end,
})
