-- examples/tutorial.lua (MXNet's GPU tutorial as a luon program) runs end to
-- end on a CPU-only machine on a small fashion-leaf tree made by
-- scripts/make_dataset (it reads ./datasets/train and ./datasets/validation
-- relative to where it runs, as the tutorial does).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local root, exists, absolute = H.root, H.exists, H.absolute

-- ok (exit status 0) and what cmd printed (the command below runs in
-- another directory: paths are made absolute)
local function run(cmd)
  local out, status = H.sh(cmd)
  return status == 0, out
end

describe("examples/tutorial.lua", function()
  it("runs on the default dataset (a small copy)", function()
    local spec = root .. "examples/tutorial.lua"
    assert.is_true(exists(spec), spec)
    spec = absolute(spec)
    local luon = absolute(H.luon_exe())
    local dir = os.tmpname()
    os.remove(dir)
    assert.is_true((run(("mkdir -p '%s/datasets'"):format(dir))))
    local ok, out = run(("'%s' '%s' --out '%s/leaf' --train 40 --validation 12 --test 4 --quiet")
                        :format(luon, absolute(root .. "scripts/make_dataset"), dir))
    assert.is_true(ok, out)
    assert.is_true((run(("ln -s '%s/leaf/train' '%s/datasets/train' && ln -s '%s/leaf/validation' '%s/datasets/validation'")
                        :format(dir, dir, dir, dir))))
    ok, out = run(("cd '%s' && '%s' '%s'"):format(dir, luon, spec))
    run(("rm -rf '%s'"):format(dir))
    assert.is_true(ok, out)
    -- what the tutorial prints: the device count, the summary, the log
    -- lines of both epochs and their validation accuracy
    assert.truthy(out:find("Total params: 2206796", 1, true), out)
    assert.truthy(out:find("Using 2 GPUs", 1, true), out)
    assert.truthy(out:find("Epoch[2] Batch[5] Speed:", 1, true), out)
    assert.truthy(out:find("[Epoch 2] validation: validation accuracy=", 1, true), out)
  end)
end)
