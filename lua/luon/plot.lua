-- luon.plot: training curves as a PNG, drawn with cairo through the FFI
-- (Debian's libcairo2, loaded at the first chart: luon needs cairo only to
-- draw), and the CSV logs they are read from. Not a plotting library: one
-- kind of chart, a panel per quantity, train and validation on each.
--   plot.curves("log.csv", "curves.png", {title = "LeafNetwork"})
local core = require("luon.core")
local ffi = core.ffi

local plot = {}

---------------------------------------------------------------------------
-- CSV: the log's format (gluon.contrib.estimator.CSVLogHandler writes it)
--   epoch,batch,kind,training accuracy,...,validation accuracy,...
-- epoch: epochs done (fractional on 'batch' rows), batch: batches done
-- since the start, kind: 'batch' (every N batches) or 'epoch' (at an
-- epoch's end); an empty cell: no value (a metric not updated).

local function csv_split(line)
  local t = {}
  for cell in (line .. ","):gmatch("([^,]*),") do t[#t + 1] = cell end
  return t
end

-- read_csv(path) -> {columns = {names...}, rows = {{name = value}...}}:
-- numbers where a cell is one, else the string (kind), nil where empty.
function plot.read_csv(path)
  core.path_arg(path, "plot.read_csv")
  local f, err = io.open(path, "rb")
  if not f then core.error(("plot.read_csv: cannot read %s (%s)"):format(path, tostring(err))) end
  local text = f:read("*a")
  f:close()
  local lines = {}
  for line in text:gmatch("[^\r\n]+") do lines[#lines + 1] = line end
  if #lines == 0 then core.error(("plot.read_csv: %s is empty (expected a header line)"):format(path)) end
  local columns = csv_split(lines[1])
  local rows = {}
  for i = 2, #lines do
    local cells = csv_split(lines[i])
    if #cells ~= #columns then
      core.error(("plot.read_csv: %s line %d has %d cells, the header %d"):format(path, i, #cells, #columns))
    end
    local row = {}
    for k, name in ipairs(columns) do
      local c = cells[k]
      if c ~= "" then row[name] = tonumber(c) or c end
    end
    rows[#rows + 1] = row
  end
  return {columns = columns, rows = rows}
end

-- A number as a CSV cell: empty for nil and NaN, %.6g otherwise.
local function cell(v)
  if type(v) ~= "number" then return v == nil and "" or tostring(v) end
  if v ~= v then return "" end
  return ("%.6g"):format(v)
end

-- CSVLog(path, names): a log in this format with the metric columns
-- names, started anew: the header is written beside path and renamed over
-- it, so a path that cannot be written is an error that leaves the
-- previous file as it was. log:write(epoch, batch, kind, values) appends
-- a row (values[k] the value of names[k]; nil or NaN: an empty cell).
local CSVLog = core.class("CSVLog")
plot.CSVLog = CSVLog

function CSVLog:__init(path, names)
  core.path_arg(path, "CSVLog", "path")
  if type(names) ~= "table" then
    core.error(("CSVLog: names must be a list of column names, got %s"):format(core.show_value(names)))
  end
  local header = {"epoch", "batch", "kind"}
  for k, name in ipairs(names) do
    if type(name) ~= "string" or name == "" or name:find("[,\r\n]") then
      core.error(("CSVLog: names[%d] must be a non-empty string without commas or line breaks, got %s")
                 :format(k, core.show_value(name)))
    end
    header[#header + 1] = name
  end
  local tmp = path .. ".part"
  local f, err = io.open(tmp, "wb")
  if not f then core.error(("CSVLog: cannot write %s (%s)"):format(path, tostring(err))) end
  f:write(table.concat(header, ","), "\n")
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then
    os.remove(tmp)
    core.error(("CSVLog: cannot write %s (%s)"):format(path, tostring(rerr)))
  end
  self.path, self.n = path, #names
end

function CSVLog:write(epoch, batch, kind, values)
  if kind ~= "epoch" and kind ~= "batch" then
    core.error(("CSVLog.write: kind must be 'epoch' or 'batch', got %s"):format(core.show_value(kind)))
  end
  local cells = {cell(core.num_arg(epoch, "CSVLog.write", "epoch")),
                 cell(core.num_arg(batch, "CSVLog.write", "batch")), kind}
  if type(values) ~= "table" or #values > self.n then
    core.error(("CSVLog.write: values must be a list of at most %d (one per column after epoch, batch and " ..
                "kind), got %s"):format(self.n, type(values) == "table" and #values .. " values" or core.show_value(values)))
  end
  for k = 1, self.n do cells[#cells + 1] = cell(values[k]) end
  local f, err = io.open(self.path, "ab")
  if not f then core.error(("CSVLog.write: cannot write %s (%s)"):format(self.path, tostring(err))) end
  f:write(table.concat(cells, ","), "\n")
  f:close()
end

---------------------------------------------------------------------------
-- cairo, loaded on first use

local cairo
local function load_cairo(fname)
  if cairo then return cairo end
  -- declared once per process: this file may be loaded again (a module
  -- reloader, busted's insulation), and a second declaration is an error
  if not pcall(ffi.typeof, "luon_cairo_text_extents") then ffi.cdef [[
typedef struct _cairo cairo_t;
typedef struct _cairo_surface cairo_surface_t;
typedef struct { double x_bearing, y_bearing, width, height, x_advance, y_advance; } luon_cairo_text_extents;
cairo_surface_t *cairo_image_surface_create(int format, int width, int height);
int cairo_surface_status(cairo_surface_t *surface);
int cairo_surface_write_to_png(cairo_surface_t *surface, const char *filename);
void cairo_surface_destroy(cairo_surface_t *surface);
cairo_t *cairo_create(cairo_surface_t *target);
int cairo_status(cairo_t *cr);
const char *cairo_status_to_string(int status);
void cairo_destroy(cairo_t *cr);
void cairo_save(cairo_t *cr);
void cairo_restore(cairo_t *cr);
void cairo_set_source_rgba(cairo_t *cr, double r, double g, double b, double a);
void cairo_paint(cairo_t *cr);
void cairo_set_line_width(cairo_t *cr, double width);
void cairo_set_dash(cairo_t *cr, const double *dashes, int num_dashes, double offset);
void cairo_move_to(cairo_t *cr, double x, double y);
void cairo_line_to(cairo_t *cr, double x, double y);
void cairo_new_path(cairo_t *cr);
void cairo_arc(cairo_t *cr, double xc, double yc, double radius, double angle1, double angle2);
void cairo_rectangle(cairo_t *cr, double x, double y, double width, double height);
void cairo_stroke(cairo_t *cr);
void cairo_fill(cairo_t *cr);
void cairo_fill_preserve(cairo_t *cr);
void cairo_clip(cairo_t *cr);
void cairo_rotate(cairo_t *cr, double angle);
void cairo_select_font_face(cairo_t *cr, const char *family, int slant, int weight);
void cairo_set_font_size(cairo_t *cr, double size);
void cairo_show_text(cairo_t *cr, const char *utf8);
void cairo_text_extents(cairo_t *cr, const char *utf8, luon_cairo_text_extents *extents);
]] end
  local ok, lib = pcall(ffi.load, "cairo")
  if not ok then ok, lib = pcall(ffi.load, "libcairo.so.2") end
  if not ok then
    core.error(("%s: cannot load cairo (libcairo.so.2), which luon draws charts with; install the " ..
                "Debian package libcairo2 (apt-get install libcairo2)"):format(fname))
  end
  cairo = lib
  return cairo
end

---------------------------------------------------------------------------
-- Axes

-- Ticks over [lo, hi]: about n values at a step of 1, 2 or 5 times a
-- power of ten; the (widened) range and the step.
local function ticks(lo, hi, n)
  if hi - lo < 1e-12 * math.max(1, math.abs(lo), math.abs(hi)) then
    local pad = lo ~= 0 and math.abs(lo) * 0.1 or 1
    lo, hi = lo - pad, hi + pad
  end
  local raw = (hi - lo) / n
  local mag = 10 ^ math.floor(math.log10(raw))
  local step = mag * 10
  for _, m in ipairs({1, 2, 5}) do
    if raw <= m * mag then step = m * mag break end
  end
  lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
  local t = {}
  for k = 0, math.floor((hi - lo) / step + 0.5) do t[#t + 1] = lo + k * step end
  return t, lo, hi, step
end

local function tick_text(v, step)
  local decimals = -math.floor(math.log10(step) + 1e-9)
  if math.abs(v) < step * 1e-6 then v = 0 end
  return (("%%.%df"):format(decimals > 0 and decimals or 0)):format(v)
end

local colors = {train = {0.12, 0.47, 0.71}, validation = {0.85, 0.37, 0.01}}

---------------------------------------------------------------------------
-- The panels: one per quantity ("training accuracy" and "validation
-- accuracy" are the quantity "accuracy"), losses first.

local function quantities(log)
  local order, by = {}, {}
  for k = 4, #log.columns do
    local col = log.columns[k]
    local side, name = "train", col
    if col:match("^training ") then name = col:sub(10)
    elseif col:match("^validation ") then side, name = "validation", col:sub(12) end
    if not by[name] then by[name] = {name = name}; order[#order + 1] = by[name] end
    by[name][side] = col
  end
  local losses, others = {}, {}
  for _, q in ipairs(order) do
    local list = q.name:lower():find("loss", 1, true) and losses or others
    list[#list + 1] = q
  end
  for _, q in ipairs(others) do losses[#losses + 1] = q end
  return losses
end

-- The points {x, y} of column col on rows of the given kind.
local function series(log, col, kind)
  local pts = {}
  if not col then return pts end
  for _, row in ipairs(log.rows) do
    local x, y = row.epoch, row[col]
    if row.kind == kind and type(x) == "number" and type(y) == "number" and y == y
       and y > -math.huge and y < math.huge then
      pts[#pts + 1] = {x, y}
    end
  end
  return pts
end

local function text_at(cr, s, x, y, align_x, align_y)
  local e = ffi.new("luon_cairo_text_extents")
  cairo.cairo_text_extents(cr, s, e)
  cairo.cairo_move_to(cr, x - e.width * align_x - e.x_bearing, y - e.height * align_y - e.y_bearing)
  cairo.cairo_show_text(cr, s)
  return e.width
end

local function line_of(cr, pts, sx, sy)
  cairo.cairo_new_path(cr)
  for k, p in ipairs(pts) do
    if k == 1 then cairo.cairo_move_to(cr, sx(p[1]), sy(p[2])) else cairo.cairo_line_to(cr, sx(p[1]), sy(p[2])) end
  end
  cairo.cairo_stroke(cr)
end

local function panel(cr, log, q, x0, y0, w, h, opts)
  local ml, mr, mt, mb = 64, 16, 30, 44
  local pw, ph = w - ml - mr, h - mt - mb
  local sets = {
    {side = "train", label = "train", pts = series(log, q.train, "epoch"), batch = series(log, q.train, "batch")},
    {side = "validation", label = "validation", pts = series(log, q.validation, "epoch"),
     batch = series(log, q.validation, "batch")},
  }
  local xmin, xmax, ymin, ymax = 0, 0, math.huge, -math.huge
  for _, s in ipairs(sets) do
    for _, list in ipairs({s.pts, opts.batches and s.batch or {}}) do
      for _, p in ipairs(list) do
        xmax = math.max(xmax, p[1])
        ymin, ymax = math.min(ymin, p[2]), math.max(ymax, p[2])
      end
    end
  end
  if ymin > ymax then ymin, ymax = 0, 1 end
  if xmax <= xmin then xmax = 1 end
  local xt, xlo, xhi, xstep = ticks(xmin, xmax, math.min(8, math.max(1, math.ceil(xmax))))
  if xstep < 1 and xmax >= 2 then xt, xlo, xhi, xstep = ticks(xmin, xmax, 4) end
  local yt, ylo, yhi, ystep = ticks(ymin, ymax, 5)
  local function sx(v) return x0 + ml + (v - xlo) / (xhi - xlo) * pw end
  local function sy(v) return y0 + mt + ph - (v - ylo) / (yhi - ylo) * ph end

  -- grid, frame, ticks and their labels
  cairo.cairo_set_font_size(cr, 11)
  cairo.cairo_set_line_width(cr, 1)
  for _, v in ipairs(yt) do
    cairo.cairo_set_source_rgba(cr, 0.88, 0.88, 0.88, 1)
    line_of(cr, {{xlo, v}, {xhi, v}}, sx, sy)
    cairo.cairo_set_source_rgba(cr, 0.2, 0.2, 0.2, 1)
    text_at(cr, tick_text(v, ystep), x0 + ml - 6, sy(v), 1, 0.5)
  end
  for _, v in ipairs(xt) do
    cairo.cairo_set_source_rgba(cr, 0.88, 0.88, 0.88, 1)
    line_of(cr, {{v, ylo}, {v, yhi}}, sx, sy)
    cairo.cairo_set_source_rgba(cr, 0.2, 0.2, 0.2, 1)
    text_at(cr, tick_text(v, xstep), sx(v), y0 + mt + ph + 6, 0.5, 0)
  end
  cairo.cairo_set_source_rgba(cr, 0.2, 0.2, 0.2, 1)
  cairo.cairo_rectangle(cr, x0 + ml + 0.5, y0 + mt + 0.5, pw, ph)
  cairo.cairo_stroke(cr)
  -- axis labels and title
  cairo.cairo_set_font_size(cr, 12)
  text_at(cr, "epoch", x0 + ml + pw / 2, y0 + h - 6, 0.5, 1)
  -- the y label, a quarter turn: device (x, y) is (-y, x) in the turned frame
  cairo.cairo_save(cr)
  cairo.cairo_rotate(cr, -math.pi / 2)
  text_at(cr, q.name, -(y0 + mt + ph / 2), x0 + 14, 0.5, 0.5)
  cairo.cairo_restore(cr)
  cairo.cairo_select_font_face(cr, "sans-serif", 0, 1)
  cairo.cairo_set_font_size(cr, 13)
  text_at(cr, q.name, x0 + ml + pw / 2, y0 + mt - 9, 0.5, 1)
  cairo.cairo_select_font_face(cr, "sans-serif", 0, 0)

  -- the curves, clipped to the plot area
  cairo.cairo_save(cr)
  cairo.cairo_rectangle(cr, x0 + ml, y0 + mt, pw, ph)
  cairo.cairo_clip(cr)
  for _, s in ipairs(sets) do
    local c = colors[s.side]
    if opts.batches and #s.batch > 0 then
      cairo.cairo_set_source_rgba(cr, c[1], c[2], c[3], 0.35)
      cairo.cairo_set_line_width(cr, 1)
      line_of(cr, s.batch, sx, sy)
    end
    cairo.cairo_set_source_rgba(cr, c[1], c[2], c[3], 1)
    cairo.cairo_set_line_width(cr, 2)
    line_of(cr, s.pts, sx, sy)
    for _, p in ipairs(s.pts) do
      cairo.cairo_new_path(cr)
      cairo.cairo_arc(cr, sx(p[1]), sy(p[2]), 3, 0, 2 * math.pi)
      cairo.cairo_fill(cr)
    end
  end
  cairo.cairo_restore(cr)

  -- the legend, top right inside the frame: the sides that have points
  cairo.cairo_set_font_size(cr, 11)
  local shown = {}
  for _, s in ipairs(sets) do
    if #s.pts > 0 or (opts.batches and #s.batch > 0) then shown[#shown + 1] = s end
  end
  if #shown > 0 then
    local lw, lh = 100, 8 + 16 * #shown
    -- top right, or bottom right when the curves end in the upper half
    local high, n = 0, 0
    for _, s in ipairs(shown) do
      for _, p in ipairs(s.pts) do
        if p[1] >= xlo + (xhi - xlo) * 2 / 3 then high, n = high + (p[2] > (ylo + yhi) / 2 and 1 or -1), n + 1 end
      end
    end
    local lx, ly = x0 + ml + pw - lw - 8, y0 + mt + 8
    if n > 0 and high > 0 then ly = y0 + mt + ph - lh - 8 end
    cairo.cairo_set_source_rgba(cr, 1, 1, 1, 0.85)
    cairo.cairo_rectangle(cr, lx, ly, lw, lh)
    cairo.cairo_fill_preserve(cr)
    cairo.cairo_set_source_rgba(cr, 0.6, 0.6, 0.6, 1)
    cairo.cairo_set_line_width(cr, 1)
    cairo.cairo_stroke(cr)
    for k, s in ipairs(shown) do
      local c, yy = colors[s.side], ly + 4 + 16 * (k - 1) + 8
      cairo.cairo_set_source_rgba(cr, c[1], c[2], c[3], 1)
      cairo.cairo_set_line_width(cr, 2)
      cairo.cairo_new_path(cr)
      cairo.cairo_move_to(cr, lx + 8, yy)
      cairo.cairo_line_to(cr, lx + 30, yy)
      cairo.cairo_stroke(cr)
      cairo.cairo_set_source_rgba(cr, 0.1, 0.1, 0.1, 1)
      text_at(cr, s.label, lx + 36, yy, 0, 0.5)
    end
  end
end

local curve_opts = {"title", "width", "height", "columns", "batches"}

-- curves(log, png_path, {title =, width = 480, height = 320 (a panel's),
-- columns = 2, batches = true}): a PNG of every quantity of the log (a CSV
-- path, or a table as read_csv returns) against epochs, train and
-- validation on one panel each; batches: also the every-N-batches rows,
-- faint. Written to a temporary file beside png_path, then renamed over
-- it: on an error the previous file is left as it was. Returns png_path.
function plot.curves(log, png_path, opts)
  local o = core.options(opts, "plot.curves", curve_opts)
  if type(log) == "string" then
    log = plot.read_csv(log)
  elseif type(log) ~= "table" or type(log.columns) ~= "table" or type(log.rows) ~= "table" then
    core.error(("plot.curves: log must be a CSV path or a table {columns =, rows =} as plot.read_csv " ..
                "returns, got %s"):format(core.show_value(log)))
  end
  core.path_arg(png_path, "plot.curves", "png_path")
  if not png_path:lower():match("%.png$") then
    core.error(("plot.curves: png_path must end in .png, got %q"):format(png_path))
  end
  local pw = core.int_arg(o.width or 480, "plot.curves", "width", 160, 4000)
  local ph = core.int_arg(o.height or 320, "plot.curves", "height", 120, 4000)
  local ncol = core.int_arg(o.columns or 2, "plot.curves", "columns", 1, 16)
  local batches = o.batches
  if batches == nil then batches = true end
  if type(batches) ~= "boolean" then
    core.error(("plot.curves: batches must be a boolean, got %s"):format(core.show_value(batches)))
  end
  if o.title ~= nil and type(o.title) ~= "string" then
    core.error(("plot.curves: title must be a string, got %s"):format(core.show_value(o.title)))
  end
  if log.columns[1] ~= "epoch" or log.columns[2] ~= "batch" or log.columns[3] ~= "kind" then
    core.error("plot.curves: the log's first columns must be epoch, batch, kind (CSVLogHandler's format)")
  end
  local qs = quantities(log)
  if #qs == 0 then core.error("plot.curves: the log has no metric columns to draw") end
  local lib = load_cairo("plot.curves")

  ncol = math.min(ncol, #qs)
  local nrow = math.ceil(#qs / ncol)
  local top = o.title and 28 or 0
  local W, H = ncol * pw, nrow * ph + top
  local surface = lib.cairo_image_surface_create(0, W, H)   -- CAIRO_FORMAT_ARGB32
  local cr = lib.cairo_create(surface)
  local ok, err = pcall(function()
    lib.cairo_set_source_rgba(cr, 1, 1, 1, 1)
    lib.cairo_paint(cr)
    lib.cairo_select_font_face(cr, "sans-serif", 0, 0)
    if o.title then
      lib.cairo_select_font_face(cr, "sans-serif", 0, 1)
      lib.cairo_set_font_size(cr, 15)
      lib.cairo_set_source_rgba(cr, 0.1, 0.1, 0.1, 1)
      text_at(cr, o.title, W / 2, 8, 0.5, 0)
      lib.cairo_select_font_face(cr, "sans-serif", 0, 0)
    end
    for k, q in ipairs(qs) do
      local col, row = (k - 1) % ncol, math.floor((k - 1) / ncol)
      panel(cr, log, q, col * pw, top + row * ph, pw, ph, {batches = batches})
    end
    local st = lib.cairo_status(cr)
    if st ~= 0 then error(ffi.string(lib.cairo_status_to_string(st)), 0) end
  end)
  lib.cairo_destroy(cr)
  if not ok then
    lib.cairo_surface_destroy(surface)
    core.error(("plot.curves: drawing failed (%s)"):format(tostring(err)))
  end
  local tmp = png_path .. ".part"
  local st = lib.cairo_surface_write_to_png(surface, tmp)
  lib.cairo_surface_destroy(surface)
  if st ~= 0 then
    os.remove(tmp)
    core.error(("plot.curves: cannot write %s (%s)"):format(png_path, ffi.string(lib.cairo_status_to_string(st))))
  end
  local renamed, rerr = os.rename(tmp, png_path)
  if not renamed then
    os.remove(tmp)
    core.error(("plot.curves: cannot write %s (%s)"):format(png_path, tostring(rerr)))
  end
  return png_path
end

return core.strict_module(plot, "luon.plot")
