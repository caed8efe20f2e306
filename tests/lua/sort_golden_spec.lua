-- sort_golden_spec: the sorting, searching and product functions against
-- MXNet 1.9.1's results (tests/data/sort_golden.txt, made by
-- tests/data/gen_sort_golden.py): each case's inputs, its results (values,
-- shape, dtype) and, for the differentiable ones, the gradients for the
-- head gradient 1, 2, 3, ... over each result.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon

-- name -> function(inputs...) -> list of results, as the generator's calls
local calls = {
  sort_last = function(x) return {np.sort(x)} end,
  sort_axis0 = function(x) return {np.sort(x, 0)} end,
  sort_flat = function(x) return {np.sort(x, {axis = false})} end,
  sort_int = function(x) return {np.sort(x)} end,
  sort_grad = function(x) return {np.sort(x, -1)} end,
  argsort_last = function(x) return {np.argsort(x)} end,
  argsort_axis0 = function(x) return {np.argsort(x, 0)} end,
  argsort_flat = function(x) return {np.argsort(x, false)} end,
  topk_default = function(x) return {npx.topk(x)} end,
  topk_indices_k2 = function(x) return {npx.topk(x, {k = 2})} end,
  topk_value_asc = function(x) return {npx.topk(x, {k = 3, ret_typ = "value", is_ascend = true})} end,
  topk_both_axis0 = function(x) return {npx.topk(x, {k = 2, axis = 0, ret_typ = "both"})} end,
  topk_mask = function(x) return {npx.topk(x, {k = 2, ret_typ = "mask"})} end,
  topk_all_int64 = function(x) return {npx.topk(x, {k = 0, dtype = "int64"})} end,
  topk_flat = function(x) return {npx.topk(x, {k = 4, axis = false, ret_typ = "value"})} end,
  topk_int_value = function(x) return {npx.topk(x, {k = 2, ret_typ = "value"})} end,
  topk_grad = function(x) return {npx.topk(x, {k = 2, ret_typ = "value"})} end,
  unique_flat = function(x) return {np.unique(x)} end,
  unique_all = function(x)
    return {np.unique(x, {return_index = true, return_inverse = true, return_counts = true})}
  end,
  unique_axis0 = function(x)
    return {np.unique(x, {axis = 0, return_index = true, return_inverse = true, return_counts = true})}
  end,
  searchsorted_left = function(a, v) return {np.searchsorted(a, v)} end,
  searchsorted_right = function(a, v) return {np.searchsorted(a, v, {side = "right"})} end,
  batch_dot = function(a, b) return {npx.batch_dot(a, b)} end,
  batch_dot_ta = function(a, b) return {npx.batch_dot(a, b, {transpose_a = true})} end,
  batch_dot_tb = function(a, b) return {npx.batch_dot(a, b, {transpose_b = true})} end,
  batch_dot_4d_grad = function(a, b) return {npx.batch_dot(a, b, {transpose_a = false, transpose_b = true})} end,
  dot_nd = function(a, b) return {np.dot(a, b)} end,
  dot_nd_1d = function(a, b) return {np.dot(a, b)} end,
  dot_1d_nd = function(a, b) return {np.dot(a, b)} end,
  tensordot_int = function(a, b) return {np.tensordot(a, b, 2)} end,
  tensordot_pair = function(a, b) return {np.tensordot(a, b, {{1, 2}, {1, 0}})} end,
  tensordot_grad = function(a, b) return {np.tensordot(a, b, {{1}, {0}})} end,
  outer = function(a, b) return {np.outer(a, b)} end,
  inner = function(a, b) return {np.inner(a, b)} end,
  vdot = function(a, b) return {np.vdot(a, b)} end,
  einsum_matmul = function(a, b) return {np.einsum("ij,jk->ik", a, b)} end,
  einsum_implicit = function(a, b) return {np.einsum("ij,jk", a, b)} end,
  einsum_trace = function(a) return {np.einsum("ii", a)} end,
  einsum_diag = function(a) return {np.einsum("ii->i", a)} end,
  einsum_transpose = function(a) return {np.einsum("ijk->kij", a)} end,
  einsum_sum = function(a) return {np.einsum("ij->", a)} end,
  einsum_outer = function(a, b) return {np.einsum("i,j->ij", a, b)} end,
  einsum_batch = function(a, b) return {np.einsum("bij,bjk->bik", a, b)} end,
  einsum_ellipsis = function(a, b) return {np.einsum("...ij,...jk->...ik", a, b)} end,
  einsum_bilinear = function(a, b) return {np.einsum("ij,jj->i", a, b)} end,
  einsum_grad = function(a, b) return {np.einsum("ijk,kj->ik", a, b)} end,
  einsum_chain3 = function(a, b, c) return {np.einsum("ij,jk,kl->il", a, b, c)} end,
  einsum_implicit3 = function(a, b, c) return {np.einsum("ij,jk,ik", a, b, c)} end,
  einsum_ellipsis3 = function(a, b, c) return {np.einsum("...ij,...jk,k->...i", a, b, c)} end,
  einsum_four = function(a, b, c, d) return {np.einsum("ij,j,jk,ki->", a, b, c, d)} end,
  einsum3_grad = function(a, b, c) return {np.einsum("ij,jjk,ik->ki", a, b, c)} end,
}

-- "2x3 float32 v1 v2 ..." -> shape, dtype, values
local function parse(rest)
  local words = {}
  for w in rest:gmatch("%S+") do words[#words + 1] = w end
  local shape = {}
  if words[1] ~= "-" then for d in words[1]:gmatch("%d+") do shape[#shape + 1] = tonumber(d) end end
  local vals = {}
  for k = 3, #words do vals[#vals + 1] = tonumber(words[k]) end
  return shape, words[2], vals
end

local cases, order = {}, {}
for line in io.lines(H.root .. "tests/data/sort_golden.txt") do
  local kind, rest = line:match("^(%S+) ?(.*)$")
  if kind == "case" then
    order[#order + 1] = rest
    cases[rest] = {ins = {}, outs = {}}
  else
    local c = cases[order[#order]]
    local shape, dt, vals = parse(rest)
    local list = kind == "in" and c.ins or c.outs
    list[#list + 1] = {shape = shape, dtype = dt, vals = vals}
  end
end

local function make(r, dev)
  local x = np.array(r.vals, {dtype = r.dtype, device = dev})
  return np.reshape(x, r.shape)
end

for _, dev in ipairs(H.devices()) do
  describe("MXNet's results on " .. tostring(dev), function()
    it("cover every case of the golden file", function()
      for _, name in ipairs(order) do assert(calls[name], "no call for golden case " .. name) end
    end)
    for _, name in ipairs(order) do
      it(name, function()
        local c = cases[name]
        local xs = {}
        for k, r in ipairs(c.ins) do xs[k] = make(r, dev) end
        local grad = name:match("grad$")
        local outs
        if grad then
          for _, x in ipairs(xs) do x:attach_grad() end
          outs = luon.autograd.record(function() return calls[name](unpack(xs)) end)
          local heads = {}
          for k, o in ipairs(outs) do
            heads[k] = np.reshape(np.arange(1, o.size + 1, {dtype = o.dtype, device = dev}), o.shape)
          end
          luon.autograd.backward(outs, heads)
          for _, x in ipairs(xs) do outs[#outs + 1] = x.grad end
        else
          outs = calls[name](unpack(xs))
        end
        assert.equal(#c.outs, #outs, name .. ": number of results")
        for k, want in ipairs(c.outs) do
          local got = outs[k]
          assert.equal(want.dtype, got.dtype, ("%s: result %d's dtype"):format(name, k))
          H.assert_shape(got, want.shape)
          local tol = want.dtype:match("float") and 1e-5 or 0
          H.assert_close(got:reshape({-1}):totable(), want.vals, tol)
        end
      end)
    end
  end)
end
