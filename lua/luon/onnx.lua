-- luon.onnx: a hybridized block's graph, or an exported one, as an ONNX
-- model for hosts that run ONNX Runtime or TensorRT (MXNet 1.9's
-- mx.onnx.export_model). The translation is core/onnx.c's: opset 13, the
-- parameters as initializers under their structural names, the inputs and
-- outputs with the shapes the graph was traced with.
--
-- export_model(sym, params, in_shapes, in_types, onnx_file_path, verbose,
-- dynamic) -> onnx_file_path, or export_model(sym, params, {in_shapes =,
-- in_types =, onnx_file_path =, dynamic =}) (MXNet's keywords):
--   sym      a HybridBlock hybridized and run once for inference (its
--            latest inference graph, as block:export writes), a
--            SymbolBlock, or the path of a -symbol.json file;
--   params   with a file: its .safetensors path (nil for a graph without
--            parameters); with a block: nil;
--   in_shapes, in_types  optional: a block keeps a graph per input
--            signature it ran on, and these choose among them (the latest
--            by default); of a file or SymbolBlock they must be its inputs;
--   onnx_file_path  default "model.onnx", replaced whole;
--   dynamic  true is refused: the export has fixed shapes (export once per
--            batch size).
-- An op with no ONNX equivalent that computes the same values is an error
-- naming the node, and no file is written.
local core = require("luon.core")
local hybrid = require("luon.gluon.hybrid")
local ffi, C = core.ffi, core.C

local M = {}
local fname = "onnx.export_model"

-- the graph's input k (0-based) as {dtype name, shape}
local function input_sig(g, k)
  local dt, nd, shape = ffi.new("int32_t[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[8]")
  core.check(C.luon_graph_io(g, 0, k, dt, nd, shape))
  local s = {}
  for d = 0, nd[0] - 1 do s[d + 1] = tonumber(shape[d]) end
  return ffi.string(C.luon_dtype_name(dt[0])), s
end

local function shape_str(s) return "(" .. table.concat(s, ", ") .. (#s == 1 and ",)" or ")") end

-- nil when in_shapes / in_types, when given, are the graph's inputs, else
-- what differs; raises on malformed lists
local function input_mismatch(g, in_shapes, in_types)
  local n = tonumber(C.luon_graph_num_inputs(g))
  if in_shapes ~= nil then
    if type(in_shapes) ~= "table" then
      core.error(("%s: in_shapes must be a list of shapes, got %s"):format(fname, core.show_value(in_shapes)))
    end
    if type(in_shapes[1]) == "number" then in_shapes = {in_shapes} end
    if #in_shapes ~= n then
      core.error(("%s: in_shapes has %d shapes but the graph has %d inputs"):format(fname, #in_shapes, n))
    end
  end
  if in_types ~= nil and type(in_types) ~= "table" then in_types = {in_types} end
  if in_types ~= nil and #in_types ~= 1 and #in_types ~= n then
    core.error(("%s: in_types has %d dtypes but the graph has %d inputs"):format(fname, #in_types, n))
  end
  for k = 1, n do
    local dt, shape = input_sig(g, k - 1)
    local want = in_shapes and in_shapes[k]
    if want then
      if not (type(want) == "table" and core.same_shape(want, shape)) then
        return ("in_shapes[%d] is %s but the graph was traced for %s"):format(k,
               type(want) == "table" and shape_str(want) or core.show_value(want), shape_str(shape))
      end
    end
    local t = in_types and (in_types[k] or in_types[1])
    if t ~= nil then
      local id = core.dtype_id(t, fname)
      if ffi.string(C.luon_dtype_name(id)) ~= dt then
        return ("in_types[%d] is %s but the graph's input %d is %s"):format(k, tostring(t), k, dt)
      end
    end
  end
  return nil
end

function M.export_model(sym, params, in_shapes, in_types, onnx_file_path, verbose, dynamic)
  if type(in_shapes) == "table" and next(in_shapes) ~= nil and in_shapes[1] == nil then
    if in_types ~= nil or onnx_file_path ~= nil or verbose ~= nil or dynamic ~= nil then
      core.error(("%s: the options come either as a table of keywords or positionally after params, not both")
                 :format(fname))
    end
    local o = core.options(in_shapes, fname, {"in_shapes", "in_types", "onnx_file_path", "verbose", "dynamic",
                                              "dynamic_input_shapes", "run_shape_inference"})
    in_shapes, in_types, onnx_file_path, dynamic = o.in_shapes, o.in_types, o.onnx_file_path, o.dynamic
    if o.dynamic_input_shapes ~= nil then dynamic = true end
  end
  local _ = verbose
  if dynamic then
    core.error(("%s: dynamic shapes are not supported: luon exports the shapes a graph was traced with " ..
                "(export once per batch size)"):format(fname))
  end
  onnx_file_path = onnx_file_path == nil and "model.onnx" or onnx_file_path
  if type(onnx_file_path) ~= "string" or onnx_file_path == "" then
    core.error(("%s: onnx_file_path must be a file name, got %s"):format(fname, core.show_value(onnx_file_path)))
  end
  local g, names, keep
  if type(sym) == "string" then
    if params ~= nil and type(params) ~= "string" then
      core.error(("%s: params must be the .safetensors path written with %s, or nil, got %s")
                 :format(fname, sym, core.show_value(params)))
    end
    local gp = ffi.new("luon_graph*[1]")
    core.check(C.luon_graph_load(sym, params, C.LUON_CPU, 0, gp))
    g = ffi.gc(gp[0], C.luon_graph_free)
  elseif (type(sym) == "userdata" or type(sym) == "table") and
         type(select(2, pcall(function() return sym._export_graph end))) == "function" then
    if params ~= nil then
      core.error(("%s: params must be nil when sym is a block (its parameters are exported), got %s")
                 :format(fname, core.show_value(params)))
    end
    -- of the block's inference graphs (one per input signature), the
    -- latest that in_shapes and in_types describe
    g, names, keep = sym:_export_graph(fname, function(c) return input_mismatch(c, in_shapes, in_types) == nil end)
    if not g then
      local latest = sym:_export_graph(fname)
      core.error(("%s: none of the block's %d inference graphs has those inputs (the latest: %s); run the " ..
                  "block on such an input (for inference) and export again")
                 :format(fname, names, input_mismatch(latest, in_shapes, in_types)))
    end
  else
    core.error(("%s: sym must be a hybridized block or the path of a -symbol.json file, got %s")
               :format(fname, core.show_value(sym)))
  end
  local why = input_mismatch(g, in_shapes, in_types)
  if why then
    core.error(("%s: %s; run the block on an input of that shape (for inference) and export again")
               :format(fname, why))
  end
  core.check(C.luon_graph_save_onnx(g, onnx_file_path, nil, names))
  local _ = keep -- the names live until the save is done
  return onnx_file_path
end

return M
