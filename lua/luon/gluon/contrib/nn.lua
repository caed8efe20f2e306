-- luon.gluon.contrib.nn: MXNet 1.x's gluon.contrib.nn names for layers that
-- luon keeps in gluon.nn: Concurrent and HybridConcurrent (nn.Concatenate
-- and nn.HybridConcatenate under their 1.x names), Identity, SyncBatchNorm.
local core = require("luon.core")
local nn = require("luon.gluon.nn")

local contrib_nn = {
  Concurrent = nn.Concatenate:extend("Concurrent"),
  HybridConcurrent = nn.HybridConcatenate:extend("HybridConcurrent"),
  Identity = nn.Identity,
  SyncBatchNorm = nn.SyncBatchNorm,
}
for name, cls in pairs({Concurrent = contrib_nn.Concurrent, HybridConcurrent = contrib_nn.HybridConcurrent}) do
  local init = cls.__init
  cls.__init = function(self, ...)
    local o = core.args(name, {"axis"}, {"axis"}, ...)
    init(self, {axis = o.axis})
  end
end

return core.strict_module(contrib_nn, "gluon.contrib.nn")
