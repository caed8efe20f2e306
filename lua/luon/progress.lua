-- luon.progress: the one progress bar of luon's training loops (the
-- Estimator's LoggingHandler, scripts/leaf_train.lua): on a terminal a bar
-- with the done/total count, a text and an ETA, redrawn in place; when
-- stdout is not a terminal it draws nothing (log lines are printed instead).
local core = require("luon.core")
local ffi = core.ffi

-- declared once per process (a module reloader, busted's insulation, runs
-- this file again; a second declaration is an error)
if not pcall(function() return ffi.C.isatty end) then ffi.cdef("int isatty(int fd);") end

local progress = {}

-- Whether stdout is a terminal.
function progress.isatty() return ffi.C.isatty(1) == 1 end

local Bar = core.class("Bar")
progress.Bar = Bar

-- Bar{total = N, label = '[Epoch 1]', width = 30, clock = luon.clock}
function Bar:__init(kw)
  local a = core.options(kw, "progress.Bar", {"total", "label", "width", "clock"})
  self.total = core.int_arg(a.total or 0, "progress.Bar", "total", 0)
  self.width = core.int_arg(a.width or 30, "progress.Bar", "width", 1, 200)
  self.label = a.label ~= nil and tostring(a.label) or ""
  self.clock = a.clock or require("luon").clock
  self.tty = progress.isatty()
  self.started = self.clock()
  self.shown = 0
end

-- Draw the bar at done of total, with text after it ("loss 0.3 acc 0.9").
function Bar:update(done, text)
  if not self.tty then return end
  local total = math.max(self.total, done)
  local filled = total > 0 and math.floor(self.width * done / total) or 0
  local elapsed = self.clock() - self.started
  local eta = done > 0 and elapsed / done * (total - done) or 0
  local line = ("%s [%s%s] %d/%d  %s  ETA %ds"):format(self.label, ("="):rep(filled),
               (" "):rep(self.width - filled), done, total, text or "", math.floor(eta + 0.5))
  io.write("\r", line, (" "):rep(math.max(0, self.shown - #line)))
  io.flush()
  self.shown = #line
end

-- Erase the bar (before a log line, and at the end).
function Bar:clear()
  if not self.tty or self.shown == 0 then return end
  io.write("\r", (" "):rep(self.shown), "\r")
  io.flush()
  self.shown = 0
end

return core.strict_module(progress, "luon.progress")
