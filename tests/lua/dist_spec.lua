-- luon.dist across two processes on this machine: `mpirun -np 2` of the
-- scripts in tests/dist (collectives, training, a rank that dies), each
-- started and waited for here under `timeout`. Training N steps on two
-- processes, each on its shard of the same global batches, with
-- Trainer{kvstore = 'dist'} ends with the parameters of one process on the
-- whole batches. Pending when mpirun is not installed (openmpi-bin).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, gluon, dist = luon.np, luon.gluon, luon.dist
local serialize = require("luon.serialize")

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local scripts = here .. "../dist/"

local luon_exe = H.luon_exe()

local quote, exists = H.quote, H.exists

-- Run a shell command (stderr too) with a wall-clock guard; returns the
-- output, the exit status and the seconds it took. LD_PRELOAD (the ASan
-- pass's, for plain luajit) is dropped: the luon executable links its own.
local function run(cmd, env)
  local t0 = luon.clock()
  local p = io.popen(("env -u LD_PRELOAD -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK %s timeout -k 5 120 %s 2>&1; echo \"exit=$?\"")
                     :format(env or "", cmd))
  local out = p:read("*a")
  p:close()
  local status = tonumber(out:match("exit=(%d+)%s*$"))
  return out:gsub("exit=%d+%s*$", ""), status, luon.clock() - t0
end

local function mpirun_path()
  local p = io.popen("command -v mpirun 2>/dev/null")
  local path = p:read("*l")
  p:close()
  return path
end
local mpirun = mpirun_path()

local function mpi(np_, script, args, env)
  return run(("mpirun --allow-run-as-root --oversubscribe -np %d %s %s %s")
             :format(np_, quote(luon_exe), quote(scripts .. script), args or ""), env)
end

local function alone(script, args)
  return run(("%s %s %s"):format(quote(luon_exe), quote(scripts .. script), args or ""))
end

local tmpdir
local function tmp()
  if not tmpdir then
    local p = io.popen("mktemp -d")
    tmpdir = p:read("*l")
    p:close()
  end
  return tmpdir
end

local function params_of(path)
  local t = {}
  for _, e in ipairs(serialize.load(path)) do t[e.name] = e.array:totable() end
  return t
end

local function need_mpi()
  if not mpirun then pending("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)") return false end
  if not exists(luon_exe) then pending("no luon executable at " .. luon_exe) return false end
  return true
end

describe("luon.dist in one process (no launcher)", function()
  it("is rank 0 of 1 and its collectives leave arrays as they are", function()
    assert.are.equal(0, dist.rank())
    assert.are.equal(1, dist.size())
    assert.are.equal(0, dist.local_rank())
    assert.is_true(dist.is_root())
    assert.truthy(dist.backend():find("single process"))
    local x = np.array({1, 2, 3})
    assert.is_true(rawequal(x, dist.allreduce(x)))
    H.assert_close(dist.allreduce(x, "mean"):totable(), {1, 2, 3})
    H.assert_close(dist.broadcast(x, 0):totable(), {1, 2, 3})
    dist.barrier()
    H.assert_error(function() dist.broadcast(x, 1) end, {"root 1 is not a rank"})
    H.assert_error(function() dist.allreduce(x, "prod") end, {"'sum', 'mean', 'max' or 'min'"})
    H.assert_error(function() dist.allreduce(np.array({1}, {dtype = "int32"}), "mean") end, {"mean", "int32"})
  end)

  it("SplitSampler: equal contiguous parts, shuffled per epoch, reproducible with a seed", function()
    local S = gluon.data.SplitSampler
    local function list(s)
      local l = {}
      for i in s:iter() do l[#l + 1] = i end
      return l
    end
    assert.are.same({0, 1, 2}, list(S(10, 3, 0, {shuffle = false})))
    assert.are.same({6, 7, 8}, list(S(10, 3, 2, {shuffle = false})))
    assert.are.equal(3, S(10, 3, 1):len())
    assert.are.equal(3, #S(10, 3, 1))
    local seen = {}
    for i in S(10, 3, 1, {shuffle = false}) do seen[#seen + 1] = i end
    assert.are.same({3, 4, 5}, seen)
    local a = S(100, 2, 1, {seed = 5})
    local e1, e2 = list(a), list(a)
    assert.are_not.same(e1, e2) -- a new order every epoch
    assert.are.same(e1, list(S(100, 2, 1, {seed = 5})))
    table.sort(e1)
    for k = 1, 50 do assert.are.equal(49 + k, e1[k]) end
    H.assert_error(function() S(10, 2, 2) end, {"part_index 2", "num_parts 2"})
    H.assert_error(function() S(10, 0, 0) end, {"num_parts"})
    local loader = gluon.data.DataLoader(gluon.data.ArrayDataset(np.arange(10)),
                                         {batch_size = 2, sampler = dist.sampler(10, {shuffle = false})})
    local n = 0
    for _ in loader:iter() do n = n + 1 end
    assert.are.equal(5, n)
  end)

  it("Trainer{kvstore = 'dist'} alone equals the default kvstore", function()
    local function train(kv)
      np.random.seed(3)
      local net = gluon.nn.Dense(2)
      net:initialize()
      local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.5}, {kvstore = kv})
      for s = 1, 3 do
        np.random.seed(10 + s)
        local x = np.random.uniform(-1, 1, {4, 3})
        local l = luon.autograd.record(function() return (net(x) * net(x)):sum() end)
        l:backward()
        tr:step(4)
      end
      return net.weight:data():totable()
    end
    assert.are.same(train("device"), train("dist"))
  end)
end)

describe("luon.dist on two processes (mpirun -np 2)", function()
  it("allreduce, broadcast, barrier, allreduce_many and the sampler agree on both ranks", function()
    if not need_mpi() then return end
    local out, status = mpi(2, "collectives.lua")
    assert(status == 0, out)
    assert.truthy(out:find("rank 0 ok"), out)
    assert.truthy(out:find("rank 1 ok"), out)
  end)

  local cases = {
    {"an even split of 8", "--batch 8"},
    {"an uneven split of 7", "--batch 7"},
    {"two devices in each process", "--batch 8 --devices 2"},
    {"BatchNorm with global statistics", "--batch 6 --bn global --steps 3"},
    {"adam", "--batch 8 --optimizer adam"},
  }
  for _, c in ipairs(cases) do
    it("training N steps equals one process on the same global batches: " .. c[1], function()
      if not need_mpi() then return end
      local ref, two = tmp() .. "/ref", tmp() .. "/two"
      local out, status = alone("train_two.lua", "--out " .. quote(ref) .. " " .. c[2])
      assert(status == 0, out)
      out, status = mpi(2, "train_two.lua", "--out " .. quote(two) .. " " .. c[2])
      assert(status == 0, out)
      assert.truthy(out:find("rank 1 of 2"), out)
      local want = params_of(ref .. ".safetensors")
      local got0 = params_of(two .. ".rank0.safetensors")
      local got1 = params_of(two .. ".rank1.safetensors")
      local ckpt = params_of(two .. ".safetensors") -- written by rank 0 only
      local n = 0
      for name, w in pairs(want) do
        n = n + 1
        H.assert_close(got0[name], w, 2e-5)
        assert.are.same(got0[name], got1[name]) -- ranks identical to the bit
        assert.are.same(got0[name], ckpt[name])
      end
      assert.is_true(n >= 4)
    end)
  end

  it("training-mode BatchNorm: the ranks stay identical (statistics averaged)", function()
    if not need_mpi() then return end
    local two = tmp() .. "/bn"
    local out, status = mpi(2, "train_two.lua", "--out " .. quote(two) .. " --batch 8 --bn train --devices 2")
    assert(status == 0, out)
    local a, b = params_of(two .. ".rank0.safetensors"), params_of(two .. ".rank1.safetensors")
    for name, v in pairs(a) do assert.are.same(v, b[name]) end
  end)

  it("a rank that exits makes the job end at once, and mpirun names it", function()
    if not need_mpi() then return end
    local out, status, secs = mpi(2, "dead_rank.lua", "exit")
    assert.are_not.equal(0, status)
    assert(status ~= 124 and status ~= 137, "timed out:\n" .. out)
    assert(secs < 60, ("took %.1f s"):format(secs))
    assert.truthy(out:find("Exit code:%s+3"), out)
    assert.truthy(out:find("Process name: %[%[%d+,%d+%],1%]"), out) -- rank 1
    assert.falsy(out:find("allreduce returned"), out)
  end)

  it("a rank that fails with a Lua error: its message, and the job ends", function()
    if not need_mpi() then return end
    local out, status, secs = mpi(2, "dead_rank.lua", "error")
    assert.are_not.equal(0, status)
    assert(status ~= 124 and status ~= 137, "timed out:\n" .. out)
    assert(secs < 60, ("took %.1f s"):format(secs))
    assert.truthy(out:find("rank 1 failed on purpose"), out)
    assert.truthy(out:find("Process name: %[%[%d+,%d+%],1%]"), out)
  end)

  it("a rank that hangs: the others fail after LUON_DIST_TIMEOUT naming the collective", function()
    if not need_mpi() then return end
    local out, status, secs = mpi(2, "dead_rank.lua", "hang", "LUON_DIST_TIMEOUT=3")
    assert.are_not.equal(0, status)
    assert(status ~= 124 and status ~= 137, "timed out:\n" .. out)
    assert(secs < 60, ("took %.1f s"):format(secs))
    assert.truthy(out:find("allreduce%(sum, float32 %(1000,%)%) on rank 0 of 2 timed out after 3 s"), out)
  end)
end)

-- GPU arrays on machines without a GPU: the stand-in backend
-- (tests/c/fake_cuda.c, built beside the tests) has host-memory "GPUs" and
-- NCCL entries that run over MPI and log every call to LOG.<rank>.
describe("luon.dist's GPU path on two processes (stand-in CUDA backend)", function()
  local fake = (luon_exe:gsub("luon$", "tests/libluon_fake_cuda.so"))
  local function need_fake()
    if not need_mpi() then return false end
    if not exists(fake) then pending("no stand-in CUDA backend at " .. fake) return false end
    return true
  end
  local function fake_env(log, extra)
    return ("LUON_CUDA_LIB=%s LUON_FAKE_LOG=%s %s"):format(quote(fake), quote(log), extra or "")
  end
  local function lines(path)
    local t = {}
    local f = io.open(path, "r")
    if not f then return t end
    for l in f:lines() do t[#t + 1] = l end
    f:close()
    return t
  end
  local function count(list, pattern)
    local c = 0
    for _, l in ipairs(list) do if l:find(pattern) then c = c + 1 end end
    return c
  end

  it("GPU arrays go through NCCL: rank 0's unique id reaches every rank, one communicator each, " ..
     "CPU arrays never reach it", function()
    if not need_fake() then return end
    local log = tmp() .. "/nccl"
    local out, status = mpi(2, "gpu_collectives.lua", "", fake_env(log))
    assert(status == 0, out)
    local ngpu = {}
    for r, c in out:gmatch("rank (%d) ok: %d+ checks, (%d+) GPU collectives") do ngpu[tonumber(r)] = tonumber(c) end
    assert(ngpu[0] and ngpu[1] and ngpu[0] == ngpu[1], out)
    assert.truthy(out:find("GPU arrays through NCCL 2%.28%.9 on gpu%(0%)"), out)
    assert.truthy(out:find("GPU arrays through NCCL 2%.28%.9 on gpu%(1%)"), out) -- dist.device(): gpu(local_rank)
    local L0, L1 = lines(log .. ".0"), lines(log .. ".1")
    assert.are.equal(1, count(L0, "^unique_id "), table.concat(L0, "\n"))
    assert.are.equal(0, count(L1, "^unique_id "), table.concat(L1, "\n"))
    local id = L0[count(L0, "^uuid") + 1]:match("^unique_id (%x+)$")
    assert.truthy(id, table.concat(L0, "\n"))
    for r, L in pairs({[0] = L0, [1] = L1}) do
      local text = table.concat(L, "\n")
      assert.are.equal(1, count(L, "^init "), text) -- made once, kept for the process
      assert.truthy(text:find(("init nranks=2 rank=%d dev=%d id=%s"):format(r, r, id), 1, true), text)
      assert.are.equal(ngpu[r], count(L, "^allreduce ") + count(L, "^broadcast "), text)
      assert.falsy(text:find("count=77", 1, true), text) -- the CPU arrays went through MPI
      assert.are.equal("destroy", L[#L], text)                -- dist.finalize()
    end
  end)

  it("ranks sharing one GPU, or LUON_DIST_NCCL=0 on one rank: all ranks stage GPU arrays " ..
     "through host memory", function()
    if not need_fake() then return end
    local log = tmp() .. "/shared"
    local out, status = mpi(2, "gpu_collectives.lua", "--gpu 0", fake_env(log, "LUON_FAKE_GPU_UUID=card0"))
    assert(status == 0, out)
    assert.truthy(out:find("rank 1 ok"), out)
    assert.truthy(out:find("GPU arrays through host memory %(ranks 0 and 1 share one GPU, and NCCL needs a GPU per rank%)"), out)
    for r = 0, 1 do
      local text = table.concat(lines(log .. "." .. r), "\n")
      assert.falsy(text:find("init ") or text:find("allreduce ") or text:find("unique_id"), text)
    end
    log = tmp() .. "/off"
    local one = ([[sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export LUON_DIST_NCCL=0; fi; exec "$0" "$@"' ]])
    out, status = run(("mpirun --allow-run-as-root --oversubscribe -np 2 %s%s %s")
                      :format(one, quote(luon_exe), quote(scripts .. "gpu_collectives.lua")), fake_env(log))
    assert(status == 0, out)
    assert.truthy(out:find("rank 0 ok.*GPU arrays through host memory %(LUON_DIST_NCCL=0 on rank 1%)"), out)
    assert.falsy(table.concat(lines(log .. ".0"), "\n"):find("init "))
  end)

  it("a rank that hangs while the other waits inside NCCL: LUON_DIST_TIMEOUT aborts it, " ..
     "naming the collective", function()
    if not need_fake() then return end
    local log = tmp() .. "/hang"
    local out, status, secs = mpi(2, "dead_rank.lua", "hang gpu", fake_env(log, "LUON_DIST_TIMEOUT=3"))
    assert.are_not.equal(0, status)
    assert(status ~= 124 and status ~= 137, "timed out:\n" .. out)
    assert(secs < 60, ("took %.1f s"):format(secs))
    assert.truthy(out:find("allreduce%(sum, float32 %(1000,%)%) on rank 0 of 2 timed out after 3 s in ncclAllReduce"), out)
    assert.truthy(out:find("NCCL communicator was aborted"), out)
    assert.truthy(table.concat(lines(log .. ".0"), "\n"):find("abort"))
  end)

  it("training on GPUs (two per process) through NCCL equals one process on the whole batches", function()
    if not need_fake() then return end
    local ref, two, log = tmp() .. "/gref", tmp() .. "/gtwo", tmp() .. "/gtrain"
    local args = "--batch 8 --devices 2 --gpu 1 --out "
    local out, status = run(("%s %s %s"):format(quote(luon_exe), quote(scripts .. "train_two.lua"), args .. quote(ref)),
                            fake_env(tmp() .. "/galone"))
    assert(status == 0, out)
    out, status = mpi(2, "train_two.lua", args .. quote(two), fake_env(log))
    assert(status == 0, out)
    assert.truthy(out:find("GPU arrays through NCCL"), out)
    assert.truthy(count(lines(log .. ".1"), "^allreduce dtype=1 op=0") >= 4, out) -- one per step at least
    local want, got0, got1 = params_of(ref .. ".safetensors"), params_of(two .. ".rank0.safetensors"),
                             params_of(two .. ".rank1.safetensors")
    local n = 0
    for name, w in pairs(want) do
      n = n + 1
      H.assert_close(got0[name], w, 2e-5)
      assert.are.same(got0[name], got1[name])
    end
    assert.is_true(n >= 4)
  end)

  it("a CUDA backend of another build (another vtable ABI) is refused by name", function()
    if not exists(fake) then pending("no stand-in CUDA backend at " .. fake) return end
    local script = tmp() .. "/abi.lua"
    local f = assert(io.open(script, "w"))
    f:write([[local luon = require("luon")
print("gpus " .. luon.npx.num_gpus())
print(require("ffi").string(require("luon.core").C.luon_cuda_status()))
]])
    f:close()
    local out, status = run(("%s %s"):format(quote(luon_exe), quote(script)),
                            ("LUON_CUDA_LIB=%s LUON_FAKE_ABI=2"):format(quote(fake)))
    assert(status == 0, out)
    assert.truthy(out:find("gpus 0"), out)
    assert.truthy(out:find("speaks backend ABI 2 but this libluon.so speaks %d+"), out)
    out, status = run(("%s %s"):format(quote(luon_exe), quote(script)), "LUON_CUDA_LIB=" .. quote(fake))
    assert(status == 0 and out:find("gpus 2"), out)
  end)
end)

teardown(function()
  if tmpdir then os.execute("rm -rf " .. quote(tmpdir)) end
end)
