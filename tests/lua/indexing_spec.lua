-- indexing_spec: NumPy indexing on ndarrays: x[idx] gathers, x[mask]
-- selections, x[{...}] multi-axis keys, and the writes x[key] = v and
-- x:set(v); gradients through them; errors for bad keys and values; a
-- bounded fuzz of keys against a slow Lua reference. Expected values of the
-- subtle cases come from NumPy (they are noted where they do).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, luon = H.np, H.luon
local autograd = luon.autograd

-- the runtime still works after an error
local function usable(dev)
  local y = np.arange(4, {device = dev}):sum()
  assert.equal(6, y:item())
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}
    local function I(t, dt) return np.array(t, {dtype = dt or "int64", device = dev}) end
    local function B(t) return np.array(t, {dtype = "bool", device = dev}) end
    local function ar(...) return np.arange(24, D):reshape(...) end
    local m -- (3,4): 0..11
    before_each(function() m = ar(2, 12):at(0):reshape(3, 4) end)

    describe("x[idx] with an integer array", function()
      it("gathers rows, for any integer dtype", function()
        for _, dt in ipairs({"int64", "int32", "uint8"}) do
          H.check(m[I({2, 0}, dt)], {{8, 9, 10, 11}, {0, 1, 2, 3}}, {shape = {2, 4}, device = dev, dtype = "float32"})
        end
      end)
      it("has shape idx.shape + x.shape[1:], negative indices wrap", function()
        local r = m[I({{0, -1}, {-3, 1}})]
        H.check(r, {{{0, 1, 2, 3}, {8, 9, 10, 11}}, {{0, 1, 2, 3}, {4, 5, 6, 7}}}, {shape = {2, 2, 4}})
        H.check(m[I(1)], {4, 5, 6, 7}, {shape = {4}}) -- a 0-d index
        H.check(m[I({}, "int64")], {}, {shape = {0, 4}})
        H.check(np.arange(5, D)[I({4, 4, 0})], {4, 4, 0})
      end)
      it("takes an index array on another device", function()
        H.check(m[np.array({2}, {dtype = "int64"})], {{8, 9, 10, 11}}, {device = dev})
      end)
      it("out of range is an error naming the index, the axis and its size", function()
        H.assert_error(function() return m[I({0, 3})] end, {"x[key]", "index 3", "axis 0", "size 3"})
        H.assert_error(function() return m[I({-4})] end, {"x[key]", "index -4", "size 3"})
        H.assert_error(function() return m[{{}, I({4})}] end, {"index 4", "axis 1", "size 4"})
        H.assert_error(function() return m[{1, I({9})}] end, {"index 9", "axis 1", "size 4"})
        usable(dev)
      end)
    end)

    describe("x[mask] with a bool array", function()
      it("selects the rows (or elements) where the mask is true", function()
        H.check(m[B({true, false, true})], {{0, 1, 2, 3}, {8, 9, 10, 11}}, {shape = {2, 4}, device = dev})
        H.check(m[np.greater(m, 6)], {7, 8, 9, 10, 11}, {shape = {5}})
        H.check(m[B({false, false, false})], {}, {shape = {0, 4}})
        -- NumPy: m[:, [True, False, True, False]] == [[0, 2], [4, 6], [8, 10]]
        H.check(m[{{}, B({true, false, true, false})}], {{0, 2}, {4, 6}, {8, 10}})
        local x = ar(2, 3, 4)
        H.check(x[{{}, B({{true, false, false, false}, {false, false, false, true}, {false, true, false, false}})}],
                {{0, 7, 9}, {12, 19, 21}}, {shape = {2, 3}})
      end)
      it("of the wrong shape is an error naming both shapes", function()
        H.assert_error(function() return m[B({true, false})] end, {"x[key]", "(2,)", "(3,)", "(3,4)"})
        H.assert_error(function() return m[B({{true}, {false}, {true}})] end, {"(3,1)", "(3,4)"})
        H.assert_error(function() return m[B({{{true}}})] end, {"too many indices"})
        usable(dev)
      end)
    end)

    describe("x[{...}], a table read as NumPy's tuple", function()
      it("takes numbers, {start, stop, step}, true and {} per axis", function()
        H.check(m[{1, 2}], 6, {shape = {}})
        H.check(m[{{}, 1}], {1, 5, 9}, {shape = {3}})
        H.check(m[{true, -1}], {3, 7, 11})
        H.check(m[{{1, nil}, {nil, nil, -2}}], {{7, 5}, {11, 9}})
        H.check(m[{1}], {4, 5, 6, 7})
        H.check(m[{nil, 0}], {0, 4, 8}) -- a nil hole is a whole axis, as in slice
      end)
      it("x[{}] is the whole array, a view", function()
        local v = m[{}]
        H.check(v, H.iota({3, 4}), {shape = {3, 4}})
        np.zeros({3, 4}, D):copyto(v)
        H.check(m, {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}})
      end)
      it("'...' stands for the axes not named", function()
        local x = ar(2, 3, 4)
        H.check(x[{"...", 1}], {{1, 5, 9}, {13, 17, 21}})
        H.check(x[{1, "..."}], H.iota({3, 4}, 12))
        H.check(x[{"..."}], H.iota({2, 3, 4}))
      end)
      it("places an index array's axes as NumPy does", function()
        local x = ar(2, 3, 4)
        local idx = I({1, 2})
        -- NumPy shapes: x[0, :, [1,2]] (2, 3); x[:, 0, [1,2]] (2, 2); x[:, [2, 0], 1:3] (2, 2, 2)
        H.check(x[{0, {}, idx}], {{1, 5, 9}, {2, 6, 10}}, {shape = {2, 3}})
        H.check(x[{0, "...", idx}], {{1, 5, 9}, {2, 6, 10}}, {shape = {2, 3}})
        H.check(x[{{}, 0, idx}], {{1, 2}, {13, 14}}, {shape = {2, 2}})
        H.check(x[{{}, I({2, 0}), {1, 3}}], {{{9, 10}, {1, 2}}, {{21, 22}, {13, 14}}}, {shape = {2, 2, 2}})
      end)
      it("bad entries are errors naming the entry and what is expected", function()
        H.assert_error(function() return m[{"a"}] end, {"x[key]", "entry 1", "'a'", "{start, stop, step}"})
        H.assert_error(function() return m[{0, 1.5}] end, {"entry 2", "integer", "1.5"})
        H.assert_error(function() return m[{{1, "b"}}] end, {"stop of slice entry 1", "'b'"})
        H.assert_error(function() return m[{{0, 2, 0}}] end, {"step 0"})
        H.assert_error(function() return m[{{1, 2, 3, 4}}] end, {"entry 1", "key 4"})
        H.assert_error(function() return m[{a = 1}] end, {"x[key]", "key 'a'"})
        H.assert_error(function() return m[{0, 0, 0}] end, {"too many indices", "dimension 2"})
        H.assert_error(function() return m[{5}] end, {"index 5", "axis 0", "size 3"})
        H.assert_error(function() return m[{"...", "..."}] end, {"single '...'"})
        H.assert_error(function() return m[{I({0}), I({1})}] end, {"2 index arrays", "np.take"})
        H.assert_error(function() return m[{function() end}] end, {"entry 1", "function"})
        usable(dev)
      end)
    end)

    describe("bad keys", function()
      it("are errors naming the key and what is expected", function()
        H.assert_error(function() return m[np.array({0, 1.5}, D)] end,
                       {"x[key]", "float32", "(2,)", "not whole numbers", "astype('int64')"})
        H.check(m[np.array({2, 0}, D)], m[I({2, 0})]:totable()) -- whole floats index, as in MXNet
        H.assert_error(function() return m[true] end, {"x[key]", "got true"})
        H.assert_error(function() return m[nil] end, {"x[key]", "got nil"})
        H.assert_error(function() return m[B(true)] end, {"0-d bool"})
        H.assert_error(function() return m[1.5] end, {"1.5"})
        H.assert_error(function() return m[2 ^ 70] end, {"index 1.1805916207174113e+21", "size 3"})
        usable(dev)
      end)
    end)

    describe("x[key] = v", function()
      it("x[i] = v writes row i, broadcasting numbers and arrays", function()
        m[0] = 5
        m[-1] = I({1, 2, 3, 4})
        m[1] = np.ones({1, 1, 4}, D) -- leading size-1 axes are dropped, as NumPy
        H.check(m, {{5, 5, 5, 5}, {1, 1, 1, 1}, {1, 2, 3, 4}})
      end)
      it("x[{...}] = v writes the selection; x[{}] = v fills", function()
        m[{{}, 1}] = np.array({7, 8, 9}, D)
        m[{2, {nil, nil, 2}}] = -1
        H.check(m, {{0, 7, 2, 3}, {4, 8, 6, 7}, {-1, 9, -1, 11}})
        m[{}] = np.array({1, 2, 3, 4}, D)
        H.check(m, {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}})
        m[{1, 2}] = true
        H.check(m[{1}], {1, 2, 1, 4})
        m[{"...", 0}] = {10, 20, 30} -- a nested table is an array of x's dtype
        H.check(m[{{}, 0}], {10, 20, 30})
      end)
      it("writes through views, overlap-safe", function()
        local base = np.zeros({2, 6}, D)
        local v = base:slice(true, {1, 5})
        v[{{}, {nil, nil, 2}}] = 3
        H.check(base, {{0, 3, 0, 3, 0, 0}, {0, 3, 0, 3, 0, 0}})
        local a = np.arange(6, D)
        a[{{1, nil}}] = a[{{nil, -1}}] -- NumPy: [0, 0, 1, 2, 3, 4]
        H.check(a, {0, 0, 1, 2, 3, 4})
        local t = np.zeros({3, 2}, D):transpose() -- non-contiguous
        t[I({1})] = 1
        H.check(t, {{0, 0, 0}, {1, 1, 1}})
      end)
      it("x[idx] = v scatters; a repeated index keeps the last write", function()
        -- NumPy: b[[0, -3, 2]] = [[1], [2], [3]] gives [[2]*4, [4..7], [3]*4]
        m[I({0, -3, 2})] = I({{1}, {2}, {3}})
        H.check(m, {{2, 2, 2, 2}, {4, 5, 6, 7}, {3, 3, 3, 3}})
        local x = np.zeros({5}, {dtype = "int64", device = dev})
        x[I({{4, 1}, {4, 4}})] = I({{1, 2}, {3, 4}})
        H.check(x, {0, 2, 0, 0, 4}, {dtype = "int64"})
        x[I({}, "int64")] = 9 -- nothing selected
        H.check(x, {0, 2, 0, 0, 4})
        local y = ar(2, 3, 4)
        y[{1, {}, I({0, 3})}] = 0
        H.check(y[1], {{0, 13, 14, 0}, {0, 17, 18, 0}, {0, 21, 22, 0}})
      end)
      it("x[mask] = v writes where the mask is true", function()
        local x = m:copy()
        x[np.greater(x, 8)] = 0
        H.check(x, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 0, 0, 0}})
        x[B({true, false, true})] = np.array({{1, 2, 3, 4}, {5, 6, 7, 8}}, D)
        H.check(x, {{1, 2, 3, 4}, {4, 5, 6, 7}, {5, 6, 7, 8}})
        local b = np.zeros({3}, {dtype = "bool", device = dev})
        b[B({false, true, false})] = true
        H.check(b, {false, true, false})
      end)
      it("converts the value to x's dtype as NumPy (floats truncate into integers)", function()
        local x = np.zeros({3}, {dtype = "int64", device = dev})
        x[0] = 2.7
        x[I({1})] = -2.7
        H.check(x, {2, -2, 0}, {dtype = "int64"})
        x[2] = 2 ^ 40 + 1
        assert.equal(2 ^ 40 + 1, x[2]:item())
      end)
      it("reads and writes float16 and bfloat16 arrays, keeping their dtype", function()
        for _, dt in ipairs({"float16", "bfloat16"}) do
          local x = np.zeros({3, 2}, {dtype = dt, device = dev})
          x[I({2, 0, 2})] = np.array({{1, 2}, {3, 4}, {5, 6}}, D)
          x[B({false, true, false})] = 0.5
          H.check(x, {{3, 4}, {0.5, 0.5}, {5, 6}}, {dtype = dt})
          H.check(x[I({-1})], {{5, 6}}, {dtype = dt})
          H.check(x[np.greater(x, 4)], {5, 6}, {dtype = dt})
        end
      end)
      it("x:set(v) fills an array or a view in place", function()
        local x = np.zeros({3, 4}, D)
        assert.is_true(rawequal(x, x:set(1)))
        x:slice({nil}, {1, 3}):set(2)
        x:at(0):set(np.array({5, 6, 7, 8}, D))
        H.check(x, {{5, 6, 7, 8}, {1, 2, 2, 1}, {1, 2, 2, 1}})
        H.assert_error(function() x:set("a") end, {"set", "'a'"})
        H.assert_error(function() x:set(np.ones({2}, D)) end, {"set", "(2,)", "(3,4)"})
      end)
      it("bad indices and values are errors, and x is unchanged", function()
        H.assert_error(function() m[I({5})] = 1 end, {"x[key] = v", "index 5", "axis 0", "size 3"})
        H.assert_error(function() m[{0, 4}] = 1 end, {"index 4", "axis 1", "size 4"})
        H.assert_error(function() m[B({true})] = 1 end, {"x[key] = v", "(1,)", "(3,)"})
        H.assert_error(function() m[np.full({1}, 0.25, D)] = 1 end, {"float32", "astype('int64')"})
        H.assert_error(function() m[0] = np.ones({3}, D) end, {"broadcast", "(3,)", "(4,)"})
        H.assert_error(function() m[I({0, 1})] = np.ones({3, 4}, D) end, {"broadcast", "(3,4)", "(2,4)"})
        H.assert_error(function() m[0] = "a" end, {"x[key] = v", "'a'"})
        H.assert_error(function() m[0] = nil end, {"x[key] = v", "nil"})
        H.assert_error(function() m[{{0, 1}, "x"}] = 1 end, {"entry 2", "'x'"})
        H.assert_error(function() m[true] = 1 end, {"x[key] = v", "got true"})
        H.assert_error(function() m.foo = 1 end, {"cannot set field 'foo'"})
        H.assert_error(function() np.broadcast_to(np.zeros({1}, D), {3})[{}] = 1 end, {"broadcast view"})
        H.check(m, H.iota({3, 4}))
        usable(dev)
      end)
    end)

    describe("autograd", function()
      it("gradients flow through gathers, masks and multi-axis keys", function()
        local x = np.arange(12, {dtype = "float32", device = dev}):reshape(3, 4)
        x:attach_grad()
        local y = autograd.record(function() return (x[I({0, 2, 0})] * 2):sum() end)
        y:backward()
        H.check(x.grad, {{4, 4, 4, 4}, {0, 0, 0, 0}, {2, 2, 2, 2}})
        local mask = B({{true, false, true, false}, {false, false, false, true}, {true, true, true, true}})
        y = autograd.record(function() return (x[mask] * x[mask]):sum() end)
        y:backward()
        H.check(x.grad, {{0, 0, 4, 0}, {0, 0, 0, 14}, {16, 18, 20, 22}})
        y = autograd.record(function() return x[{{}, I({3, 1})}]:sum() + x[{1, {1, 3}}]:sum() end)
        y:backward()
        H.check(x.grad, {{0, 1, 0, 1}, {0, 2, 1, 1}, {0, 1, 0, 1}})
      end)
      it("writes are refused while recording into arrays in a graph, and of values in one", function()
        local x = np.zeros({3, 2}, D)
        x:attach_grad()
        for _, f in ipairs({function() x[0] = 1 end, function() x[I({1})] = 1 end,
                            function() x[B({true, false, true})] = 1 end, function() x:set(1) end}) do
          H.assert_error(function() autograd.record(f) end, {"computational graph", "autograd.record()"})
        end
        local z = np.zeros({3}, D)
        local v = np.ones({3}, D)
        v:attach_grad()
        H.assert_error(function() autograd.record(function() z[{}] = v * 2 end) end,
                       {"x[key] = v", "value is part of a computational graph"})
        H.assert_error(function() autograd.record(function() z[I({0})] = v[{{0, 1}}] end) end,
                       {"value is part of a computational graph"})
        H.check(z, {0, 0, 0})
        H.check(x, {{0, 0}, {0, 0}, {0, 0}})
        -- outside record, and into arrays outside the graph, writes work
        x[0] = 1
        autograd.record(function() z[{}] = 3 end)
        H.check(x, {{1, 1}, {0, 0}, {0, 0}})
        H.check(z, {3, 3, 3})
        assert.is_false(autograd.is_recording())
      end)
    end)

    -- A key and a value drawn at random: each call either gives what a slow
    -- Lua reference of NumPy's rules gives or raises a clean error.
    describe("fuzz", function()
      -- Python's slice.indices(n), as a list
      local function slice_list(n, b, e, st)
        st = st or 1
        local lo, hi = (st > 0) and 0 or -1, (st > 0) and n or n - 1
        local function norm(v, default)
          if v == nil then return default end
          if v < 0 then v = v + n; if v < lo then v = lo end elseif v > hi then v = hi end
          return v
        end
        b, e = norm(b, st > 0 and lo or hi), norm(e, st > 0 and hi or lo)
        local out = {}
        if st > 0 then for i = b, e - 1, st do out[#out + 1] = i end
        else for i = b, e + 1, st do out[#out + 1] = i end end
        return out
      end

      -- The reference: entries of per axis {int = i} | {list = {...}, adv =
      -- bool}; returns the result as nested tables of flat source positions,
      -- or nil and a reason the key is bad.
      local function reference(shape, entries)
        local nd = #shape
        if #entries > nd then return nil, "too many indices" end
        local strides, acc = {}, 1
        for d = nd, 1, -1 do strides[d] = acc; acc = acc * shape[d] end
        local axes, fixed, advpos, first, last = {}, 0, nil, nil, nil
        for d = 1, nd do
          local e = entries[d] or {list = slice_list(shape[d])}
          if e.int then
            local i = e.int < 0 and e.int + shape[d] or e.int
            if i < 0 or i >= shape[d] then return nil, "out of bounds" end
            fixed = fixed + i * strides[d]
            first, last = first or d, d
          else
            if e.adv then
              for k, i in ipairs(e.raw) do
                if i < -shape[d] or i >= shape[d] then return nil, "out of bounds" end
                e.list[k] = i < 0 and i + shape[d] or i
              end
              advpos = #axes + 1
              first, last = first or d, d
            end
            axes[#axes + 1] = {list = e.list, stride = strides[d], d = d}
          end
        end
        if advpos then
          local apart = false
          for _, a in ipairs(axes) do if a.d > first and a.d < last and a ~= axes[advpos] then apart = true end end
          if apart then table.insert(axes, 1, table.remove(axes, advpos)) end
        end
        local function build(k, base)
          if k > #axes then return base end
          local t = {}
          for j, i in ipairs(axes[k].list) do t[j] = build(k + 1, base + i * axes[k].stride) end
          return t
        end
        return build(1, fixed)
      end

      local function rint(lo, hi) return math.random(lo, hi) end

      -- one random key on shape: the luon key and the reference's entries
      local function random_key(shape)
        local nd = #shape
        local n = rint(0, nd + (rint(1, 10) == 1 and 1 or 0))
        local key, entries, has_adv = {}, {}, false
        for d = 1, n do
          local len = shape[d] or 2
          local r = rint(1, 10)
          if r <= 3 then
            local i = rint(-len - 1, len)
            key[d], entries[d] = i, {int = i}
          elseif r <= 6 then
            local b = rint(1, 3) == 1 and nil or rint(-len - 2, len + 2)
            local e = rint(1, 3) == 1 and nil or rint(-len - 2, len + 2)
            local st = rint(1, 3) == 1 and nil or ({-2, -1, 1, 2, 3})[rint(1, 5)]
            key[d], entries[d] = {b, e, st}, {list = slice_list(len, b, e, st)}
          elseif r <= 8 or has_adv then
            key[d], entries[d] = true, {list = slice_list(len)}
          else
            has_adv = true
            local raw = {}
            for k = 1, rint(0, 4) do raw[k] = rint(-len - 1, len) end
            key[d], entries[d] = I(raw), {adv = true, raw = raw, list = {}}
          end
        end
        return key, entries
      end

      -- (a string key is a field name, not an index: none here)
      local junk = {{"a"}, 1.5, {{"x"}}, {false}, {{1, 2, 3, 4}}, {0, 0, 0, 0, 0}, 2 ^ 70,
                    function() end, {x = 1}}

      it("reads and writes match the reference or fail cleanly", function()
        math.randomseed(7)
        local t0, iters, checked, failed = os.clock(), 0, 0, 0
        while iters < 300 and os.clock() - t0 < 3 do
          iters = iters + 1
          local nd = rint(1, 3)
          local shape = {}
          for d = 1, nd do shape[d] = rint(0, 4) end
          local size = 1
          for d = 1, nd do size = size * shape[d] end
          local x = np.arange(size, {dtype = "int64", device = dev}):reshape(shape)
          local kind = rint(1, 10)
          local key, want, why
          if kind <= 7 then
            local entries
            key, entries = random_key(shape)
            want, why = reference(shape, entries)
          elseif kind <= 9 then -- a mask, of the right shape or not
            local ms = {}
            for d = 1, rint(1, nd) do ms[d] = shape[d] + (rint(1, 4) == 1 and 1 or 0) end
            local msize, vals = 1, {}
            for d = 1, #ms do msize = msize * ms[d] end
            for j = 1, msize do vals[j] = rint(0, 1) == 1 end
            key = np.array(vals, {dtype = "bool", device = dev}):reshape(ms)
            local ok = true
            for d = 1, #ms do if ms[d] ~= shape[d] then ok = false end end
            if ok then -- the selected rows, in order
              local inner = math.floor(size / math.max(msize, 1))
              want = {}
              for j = 1, msize do
                if vals[j] then
                  if #ms == nd then want[#want + 1] = j - 1
                  else
                    local row = {}
                    for q = 1, inner do row[q] = (j - 1) * inner + q - 1 end
                    -- rows of more than one axis: nested as the remaining shape
                    local rest = {}
                    for d = #ms + 1, nd do rest[#rest + 1] = shape[d] end
                    local p = 0
                    local function nest(k)
                      if k > #rest then p = p + 1; return row[p] end
                      local t = {}
                      for q = 1, rest[k] do t[q] = nest(k + 1) end
                      return t
                    end
                    want[#want + 1] = nest(1)
                  end
                end
              end
            else
              why = "shape"
            end
          else
            key, why = junk[rint(1, #junk)], "junk"
          end
          local ok, r = pcall(function() return x[key] end)
          if want ~= nil then
            if not ok then error(("x[key] on %s failed: %s"):format(H.show(shape), tostring(r))) end
            H.assert_equal(r, want)
            -- the write of distinct negative values, last write wins
            local n = r.size
            local flat_expect = {}
            for j = 1, size do flat_expect[j] = j - 1 end
            local pos = {}
            local function collect(t) if type(t) == "table" then for _, u in ipairs(t) do collect(u) end else pos[#pos + 1] = t end end
            collect(want)
            for j = 1, #pos do flat_expect[pos[j] + 1] = -j end
            local v = np.arange(-1, -n - 1, -1, {dtype = "int64", device = dev}):reshape(r.shape)
            local y = np.arange(size, {dtype = "int64", device = dev}):reshape(shape)
            y[key] = v
            H.assert_equal(y:reshape({-1}), flat_expect)
            checked = checked + 1
          else
            if ok then error(("x[key] on %s should fail (%s) but gave %s"):format(H.show(shape), why, tostring(r))) end
            -- (a number key is x:slice's: its errors name slice)
            assert.truthy(tostring(r):find("x[key]", 1, true) or tostring(r):find("slice: ", 1, true), tostring(r))
            local wok, werr = pcall(function() x[key] = 1 end)
            assert.is_false(wok)
            assert.truthy(tostring(werr):find("x[key] = v", 1, true), tostring(werr))
            failed = failed + 1
          end
          usable(dev)
        end
        assert.truthy(checked > 20, "too few valid keys: " .. checked)
        assert.truthy(failed > 5, "too few bad keys: " .. failed)
      end)
    end)
  end)
end

-- Finite differences in float64 on the CPU: L = sum(x[key] * R).
describe("gradients by finite differences", function()
  local cases = {
    {"gather with repeats", function() return np.array({2, 0, 2, -1}, {dtype = "int64"}) end},
    {"mask", function() return np.array({{true, false, true}, {false, true, true}, {true, false, false}, {false, false, true}}, {dtype = "bool"}) end},
    {"tuple", function() return {{1, nil}, np.array({0, 2, 2}, {dtype = "int64"})} end},
    {"basic", function() return {{nil, nil, -2}, 1} end},
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      np.random.seed(3)
      local x = np.random.normal(0, 1, {4, 3}, {dtype = "float64"})
      local key = c[2]()
      local R = np.random.normal(0, 1, x[key].shape, {dtype = "float64"})
      local function L() return np.multiply(x[key], R):sum():item() end
      x:attach_grad()
      autograd.record(function() return np.multiply(x[key], R):sum() end):backward()
      local g = x.grad:reshape({-1}):totable()
      local flat = x:reshape({-1})
      local eps = 1e-6
      for j = 0, x.size - 1 do
        local v = flat[j]:item()
        flat[j] = v + eps
        local lp = L()
        flat[j] = v - eps
        local lm = L()
        flat[j] = v
        local fd = (lp - lm) / (2 * eps)
        assert(math.abs(fd - g[j + 1]) < 1e-6, ("element %d: backward %g, finite differences %g"):format(j, g[j + 1], fd))
      end
    end)
  end
end)
