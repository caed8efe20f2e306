-- luon.gluon.model_zoo: MXNet Gluon's model zoo; vision (the image
-- classifiers) loads on first use, as gluon.model_zoo.vision.
local core = require("luon.core")

return core.strict_module({}, "gluon.model_zoo", {
  vision = function() return require("luon.gluon.model_zoo.vision") end,
})
