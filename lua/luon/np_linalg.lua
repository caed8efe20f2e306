-- luon.np_linalg: np's products built on matmul (core/ops/matmul.c), so
-- that their gradients come from the ops they are made of: dot, vdot,
-- inner, outer, tensordot, einsum, and npx.batch_dot.
-- np.lua installs the np functions; npx.lua takes batch_dot. No kernels.
local core = require("luon.core")

local M = {}

local check_array = core.array_arg

local function perm_of(order) -- a Lua list of 0-based axes, as transpose takes it
  local p = {}
  for k = 1, #order do p[k] = order[k] end
  return p
end

-- The 0-based axis ax of an nd-d array, negative counted from the end, or
-- an error naming fname and what.
local function norm_axis(ax, nd, fname, what)
  core.int_arg(ax, fname, what)
  if ax < -nd or ax >= nd then
    core.error(("%s: %s %d is out of bounds for an array of dimension %d"):format(fname, what, ax, nd))
  end
  return ax < 0 and ax + nd or ax
end

local np -- luon.np, given to install (np.lua loads this file)

function M.install(np_)
  np = np_
  -- a (.., free_a.., sum..) contracted with b (sum.., free_b..) as one
  -- matmul: axes_a and axes_b (0-based, normalised, of equal sizes) pair up
  local function contract(a, b, axes_a, axes_b)
    local as, bs = a.shape, b.shape
    local in_a, in_b = {}, {}
    for k = 1, #axes_a do in_a[axes_a[k]], in_b[axes_b[k]] = true, true end
    local pa, pb, shape, M_, N_, K_ = {}, {}, {}, 1, 1, 1
    for d = 0, a.ndim - 1 do
      if not in_a[d] then pa[#pa + 1], shape[#shape + 1], M_ = d, as[d + 1], M_ * as[d + 1] end
    end
    for k = 1, #axes_a do pa[#pa + 1], K_ = axes_a[k], K_ * as[axes_a[k] + 1] end
    for k = 1, #axes_b do pb[#pb + 1] = axes_b[k] end
    for d = 0, b.ndim - 1 do
      if not in_b[d] then pb[#pb + 1], shape[#shape + 1], N_ = d, bs[d + 1], N_ * bs[d + 1] end
    end
    local a2 = np.reshape(np.transpose(a, perm_of(pa)), {M_, K_})
    local b2 = np.reshape(np.transpose(b, perm_of(pb)), {K_, N_})
    return np.reshape(np.matmul(a2, b2), shape)
  end

  -- tensordot(a, b, axes=2): axes an integer N (a's last N with b's first
  -- N) or a pair of lists (or of integers) of the axes to sum over
  function np.tensordot(a, b, axes)
    check_array(a, "tensordot", 1)
    check_array(b, "tensordot", 2)
    if axes == nil then axes = 2 end
    local la, lb = {}, {}
    if type(axes) == "number" then
      core.int_arg(axes, "tensordot", "axes", 0)
      if axes > a.ndim or axes > b.ndim then
        core.error(("tensordot: axes = %d but a has %d dimensions and b %d"):format(axes, a.ndim, b.ndim))
      end
      for k = 1, axes do la[k], lb[k] = a.ndim - axes + k - 1, k - 1 end
    elseif type(axes) == "table" and #axes == 2 then
      la, lb = axes[1], axes[2]
      if type(la) == "number" then la = {la} end
      if type(lb) == "number" then lb = {lb} end
      if type(la) ~= "table" or type(lb) ~= "table" or #la ~= #lb then
        core.error("tensordot: axes must be an integer or a pair of lists of the same length, as {{1, 0}, {0, 1}}")
      end
      local ca, cb = {}, {}
      for k = 1, #la do ca[k], cb[k] = la[k], lb[k] end
      la, lb = ca, cb
    else
      core.error(("tensordot: axes must be an integer or a pair of lists, got %s"):format(core.show_value(axes)))
    end
    local seen_a, seen_b = {}, {}
    for k = 1, #la do
      la[k] = norm_axis(la[k], a.ndim, "tensordot", "axis")
      lb[k] = norm_axis(lb[k], b.ndim, "tensordot", "axis")
      if seen_a[la[k]] or seen_b[lb[k]] then core.error("tensordot: an axis is repeated in axes") end
      seen_a[la[k]], seen_b[lb[k]] = true, true
      local sa, sb = a.shape[la[k] + 1], b.shape[lb[k] + 1]
      if sa ~= sb then
        core.error(("tensordot: shape mismatch for sum: axis %d of a has size %d but axis %d of b has size %d "
                    .. "(shapes %s and %s)"):format(la[k], sa, lb[k], sb, core.shape_text(a.shape),
                                                    core.shape_text(b.shape)))
      end
    end
    return contract(a, b, la, lb)
  end

  -- dot: NumPy's dot: 0-d scales, 1-d and 2-d as matmul, N-d sums over
  -- a's last axis and b's second-to-last (b's last when b is 1-d)
  function np.dot(a, b)
    check_array(a, "dot", 1)
    check_array(b, "dot", 2)
    local na, nb = a.ndim, b.ndim
    if na == 0 or nb == 0 then return np.multiply(a, b) end
    local ka, kb = a.shape[na], b.shape[nb == 1 and 1 or nb - 1]
    if ka ~= kb then
      core.error(("dot: shapes %s and %s not aligned: %d (dim %d of a) != %d (dim %d of b)")
                 :format(core.shape_text(a.shape), core.shape_text(b.shape), ka, na - 1, kb,
                         nb == 1 and 0 or nb - 2))
    end
    if nb <= 2 and na <= 2 then return np.matmul(a, b) end
    return contract(a, b, {na - 1}, {nb == 1 and 0 or nb - 2})
  end

  -- inner: sum over the last axes of both (0-d: a product)
  function np.inner(a, b)
    check_array(a, "inner", 1)
    check_array(b, "inner", 2)
    if a.ndim == 0 or b.ndim == 0 then return np.multiply(a, b) end
    local sa, sb = a.shape[a.ndim], b.shape[b.ndim]
    if sa ~= sb then
      core.error(("inner: the last dimensions of a %s and b %s differ (%d and %d)")
                 :format(core.shape_text(a.shape), core.shape_text(b.shape), sa, sb))
    end
    return contract(a, b, {a.ndim - 1}, {b.ndim - 1})
  end

  -- outer: a and b flattened, (M,) x (N,) -> (M, N)
  function np.outer(a, b)
    check_array(a, "outer", 1)
    check_array(b, "outer", 2)
    return np.multiply(np.reshape(a, {-1, 1}), np.reshape(b, {1, -1}))
  end

  -- vdot: the dot of the flattened arrays (real: no conjugate), 0-d
  function np.vdot(a, b)
    check_array(a, "vdot", 1)
    check_array(b, "vdot", 2)
    if a.size ~= b.size then
      core.error(("vdot: a %s and b %s have %d and %d elements; they must have as many")
                 :format(core.shape_text(a.shape), core.shape_text(b.shape), a.size, b.size))
    end
    return np.matmul(np.reshape(a, {-1}), np.reshape(b, {-1}))
  end

  M.install_einsum()
end

-- batch_dot(a, b, {transpose_a, transpose_b}): (B.., M, K) x (B.., K, N)
-- with the same batch axes (N-d, N >= 3), as MXNet
local bd_keys = {"transpose_a", "transpose_b", "forward_stype"}
local function last_two_swapped(x)
  local p = {}
  for d = 0, x.ndim - 1 do p[d + 1] = d end
  p[x.ndim - 1], p[x.ndim] = x.ndim - 1, x.ndim - 2
  return np.transpose(x, p)
end

function M.batch_dot(a, b, kw)
  check_array(a, "batch_dot", 1)
  check_array(b, "batch_dot", 2)
  kw = core.options(kw, "batch_dot", bd_keys)
  if kw.forward_stype ~= nil and kw.forward_stype ~= "default" then
    core.error("batch_dot: luon has dense arrays only (forward_stype 'default')")
  end
  if a.ndim < 3 or a.ndim ~= b.ndim then
    core.error(("batch_dot: both inputs must be N-d with the same N >= 3, got shapes %s and %s; use np.matmul to broadcast")
               :format(core.shape_text(a.shape), core.shape_text(b.shape)))
  end
  for d = 1, a.ndim - 2 do
    if a.shape[d] ~= b.shape[d] then
      core.error(("batch_dot: the leading batch dimensions must be equal, got shapes %s and %s")
                 :format(core.shape_text(a.shape), core.shape_text(b.shape)))
    end
  end
  if kw.transpose_a then a = last_two_swapped(a) end
  if kw.transpose_b then b = last_two_swapped(b) end
  local ka, kb = a.shape[a.ndim], b.shape[b.ndim - 1]
  if ka ~= kb then
    core.error(("batch_dot: the inner dimensions differ: %d and %d (shapes %s and %s after transpose_a=%s, transpose_b=%s)")
               :format(ka, kb, core.shape_text(a.shape), core.shape_text(b.shape), tostring(kw.transpose_a or false),
                       tostring(kw.transpose_b or false)))
  end
  return np.matmul(a, b)
end

---------------------------------------------------------------------------
-- einsum

-- The labels of one operand's subscripts (a list of one-character
-- strings; an ellipsis as the labels "1", "2", .. of its axes counted from
-- the right), checked against its nd axes. pos: where the term starts in
-- the subscripts, for the errors.
local function term_labels(term, pos, nd, subscripts, which)
  local labels, ell, k = {}, nil, 1
  while k <= #term do
    local ch = term:sub(k, k)
    if term:sub(k, k + 2) == "..." then
      if ell then
        core.error(("einsum: a second ellipsis at position %d of '%s'"):format(pos + k - 1, subscripts))
      end
      ell = #labels + 1
      k = k + 3
    elseif ch:match("^%a$") then
      labels[#labels + 1] = ch
      k = k + 1
    elseif ch == " " then
      k = k + 1
    else
      core.error(("einsum: invalid character '%s' at position %d of '%s' (subscripts are letters, ',', '->' and '...')")
                 :format(ch, pos + k - 1, subscripts))
    end
  end
  if not nd then return labels, ell end
  local nell = nd - #labels
  if (ell and nell < 0) or (not ell and nell ~= 0) then
    core.error(("einsum: %s has %d dimensions but its subscripts '%s' name %d"):format(which, nd, term, #labels))
  end
  if ell then
    local full = {}
    for j = 1, ell - 1 do full[#full + 1] = labels[j] end
    for j = nell, 1, -1 do full[#full + 1] = tostring(j) end
    for j = ell, #labels do full[#full + 1] = labels[j] end
    labels = full
  end
  return labels, nell
end

-- x with the axes of a repeated label replaced by their diagonal (axis p
-- kept, q summed away), until each label is on one axis.
local function diagonals(x, labels, fname, which)
  while true do
    local p, q
    for i = 1, #labels do
      for j = i + 1, #labels do
        if labels[i] == labels[j] then p, q = i, j break end
      end
      if p then break end
    end
    if not p then return x, labels end
    local n = x.shape[p]
    if x.shape[q] ~= n then
      core.error(("%s: label '%s' is repeated in %s with sizes %d and %d"):format(fname, labels[p], which, n, x.shape[q]))
    end
    local shape = {}
    for d = 1, x.ndim do shape[d] = (d == p or d == q) and n or 1 end
    local eye = np.reshape(np.eye(n, nil, nil, {dtype = x.dtype, device = x.device}), shape)
    x = np.sum(np.multiply(x, eye), q - 1)
    table.remove(labels, q)
  end
end

-- x summed over the axes whose labels keep(label) rejects.
local function sum_out(x, labels, keep)
  local axes, kept = {}, {}
  for d = 1, #labels do
    if keep(labels[d]) then kept[#kept + 1] = labels[d] else axes[#axes + 1] = d - 1 end
  end
  if #axes > 0 then x = np.sum(x, axes) end
  return x, kept
end

-- x (with labels) transposed so that its labels come in the order `order`
-- (a subset of its labels in the order wanted).
local function arrange(x, labels, order)
  local at, p, same = {}, {}, true
  for d = 1, #labels do at[labels[d]] = d - 1 end
  for k = 1, #order do
    p[k] = at[order[k]]
    same = same and p[k] == k - 1
  end
  if same then return x end
  return np.transpose(x, p)
end

-- a (labels la) and b (lb) -> their product with the labels out: batch (in
-- both and out), contracted (in both only), free (in one): (batch.., Ma, K)
-- @ (batch.., K, Nb). Labels of one side only that out lacks are summed first.
local function contract(a, la, b, lb, out)
  local in_out = {}
  for _, l in ipairs(out) do in_out[l] = true end
  local on_a, on_b = {}, {}
  for _, l in ipairs(la) do on_a[l] = true end
  for _, l in ipairs(lb) do on_b[l] = true end
  a, la = sum_out(a, la, function(l) return in_out[l] or on_b[l] end)
  b, lb = sum_out(b, lb, function(l) return in_out[l] or on_a[l] end)
  local in_a, in_b = {}, {}
  for d, l in ipairs(la) do in_a[l] = d end
  for d, l in ipairs(lb) do in_b[l] = d end
  -- a label summed over but of size 1 on one side: sum the other side first
  for l, d in pairs(in_a) do
    local e = in_b[l]
    if e and not in_out[l] and a.shape[d] ~= b.shape[e] then
      if a.shape[d] == 1 then b = np.sum(b, e - 1, {keepdims = true}) else a = np.sum(a, d - 1, {keepdims = true}) end
    end
  end
  local batch, con, fa, fb = {}, {}, {}, {}
  for _, l in ipairs(out) do
    if in_a[l] and in_b[l] then batch[#batch + 1] = l
    elseif in_a[l] then fa[#fa + 1] = l
    else fb[#fb + 1] = l end
  end
  for _, l in ipairs(la) do if in_b[l] and not in_out[l] then con[#con + 1] = l end end
  local function join(...)
    local r = {}
    for _, t in ipairs({...}) do for _, l in ipairs(t) do r[#r + 1] = l end end
    return r
  end
  a = arrange(a, la, join(batch, fa, con))
  b = arrange(b, lb, join(batch, con, fb))
  local sa, sb, M_, N_, K_ = {}, {}, 1, 1, 1
  local rshape = {}
  for k, l in ipairs(batch) do
    sa[k], sb[k] = a.shape[k], b.shape[k]
    rshape[k] = math.max(sa[k], sb[k])
  end
  for k = 1, #fa do M_ = M_ * a.shape[#batch + k]; rshape[#rshape + 1] = a.shape[#batch + k] end
  for k = 1, #fb do
    local n = b.shape[#batch + #con + k]
    N_ = N_ * n
    rshape[#rshape + 1] = n
  end
  for k = 1, #con do K_ = K_ * a.shape[#batch + #fa + k] end
  sa[#batch + 1], sa[#batch + 2] = M_, K_
  sb[#batch + 1], sb[#batch + 2] = K_, N_
  local r = np.matmul(np.reshape(a, sa), np.reshape(b, sb))
  r = np.reshape(r, rshape)
  return arrange(r, join(batch, fa, fb), out)
end

function M.install_einsum()
  -- einsum(subscripts, a, b, ...): implicit output (the labels seen once, in
  -- alphabetical order, after the ellipsis axes) or explicit after '->'
  function np.einsum(subscripts, ...)
    local ops = {...}
    if type(subscripts) ~= "string" then
      core.error(("einsum: the subscripts must be a string such as 'ij,jk->ik', got %s"):format(core.show_value(subscripts)))
    end
    if #ops == 0 then core.error("einsum: expected one or more operands after the subscripts") end
    for k = 1, #ops do check_array(ops[k], "einsum", k + 1) end
    local lhs, rhs = subscripts, nil
    local arrow = subscripts:find("->", 1, true)
    if arrow then lhs, rhs = subscripts:sub(1, arrow - 1), subscripts:sub(arrow + 2) end
    local terms, starts, from = {}, {}, 1
    while true do
      local c = lhs:find(",", from, true)
      terms[#terms + 1], starts[#starts + 1] = lhs:sub(from, (c or #lhs + 1) - 1), from - 1
      if not c then break end
      from = c + 1
    end
    if #terms ~= #ops then
      core.error(("einsum: '%s' has %d operand terms but %d operands were given"):format(subscripts, #terms, #ops))
    end
    local labels, size, count, nell = {}, {}, {}, 0
    for k = 1, #ops do
      local which = "operand " .. k
      local ls, ne = term_labels(terms[k], starts[k], ops[k].ndim, subscripts, which)
      nell = math.max(nell, ne)
      for d = 1, #ls do
        local l, n = ls[d], ops[k].shape[d]
        count[l] = (count[l] or 0) + 1
        local known = size[l]
        if known and known ~= n and known ~= 1 and n ~= 1 then
          local what = l:match("%a") and ("label '" .. l .. "'") or "an axis of '...'"
          core.error(("einsum: %s has size %d in one place and %d in %s (subscripts '%s')")
                     :format(what, known, n, which, subscripts))
        end
        if not known or known == 1 then size[l] = n end
      end
      labels[k] = ls
    end
    -- the output's labels
    local out = {}
    if rhs then
      local ls, ell = term_labels(rhs, arrow + 1, nil, subscripts, "the output")
      local seen = {}
      for d = 1, #ls do
        local l = ls[d]
        if seen[l] then core.error(("einsum: output label '%s' appears twice in '%s'"):format(l, subscripts)) end
        if not count[l] then
          core.error(("einsum: output label '%s' is not among the operands' labels in '%s'"):format(l, subscripts))
        end
        seen[l] = true
      end
      if nell > 0 and not ell then
        core.error(("einsum: the operands have '...' axes but the output of '%s' has no '...'"):format(subscripts))
      end
      for j = 1, (ell or #ls + 1) - 1 do out[#out + 1] = ls[j] end
      if ell then for j = nell, 1, -1 do out[#out + 1] = tostring(j) end end
      for j = ell or #ls + 1, #ls do out[#out + 1] = ls[j] end
    else
      for j = nell, 1, -1 do out[#out + 1] = tostring(j) end
      local once = {}
      for l, c in pairs(count) do if c == 1 and l:match("%a") then once[#once + 1] = l end end
      table.sort(once)
      for _, l in ipairs(once) do out[#out + 1] = l end
    end
    local in_out = {}
    for _, l in ipairs(out) do in_out[l] = true end

    -- each operand: diagonals, then its labels no one else needs summed away
    local xs = {}
    for k = 1, #ops do
      local x, ls = diagonals(ops[k], labels[k], "einsum", "operand " .. k)
      local other = {}
      for j = 1, #ops do
        if j ~= k then for _, l in ipairs(labels[j]) do other[l] = true end end
      end
      xs[k], labels[k] = sum_out(x, ls, function(l) return in_out[l] or other[l] end)
    end
    if #ops == 1 then return arrange(xs[1], labels[1], out) end

    -- three or more: left to right, each pair's result keeping the labels
    -- the output or a later operand needs
    local a, la = xs[1], labels[1]
    for k = 2, #ops - 1 do
      local need = {}
      for l in pairs(in_out) do need[l] = true end
      for j = k + 1, #ops do for _, l in ipairs(labels[j]) do need[l] = true end end
      local keep, seen = {}, {}
      for _, t in ipairs({la, labels[k]}) do
        for _, l in ipairs(t) do
          if need[l] and not seen[l] then keep[#keep + 1], seen[l] = l, true end
        end
      end
      a, la = contract(a, la, xs[k], labels[k], keep), keep
    end
    return contract(a, la, xs[#ops], labels[#ops], out)
  end
end

return M
