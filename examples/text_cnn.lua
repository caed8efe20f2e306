-- text_cnn.lua: a port of example/cnn_text_classification/text_cnn.py in
-- apache/mxnet 1.x (v1.9.1), Kim's CNN for sentence classification, written
-- as a Gluon network: Embedding, one Conv1D + ReLU + GlobalMaxPool1D per
-- filter width (3, 4, 5) side by side in a HybridConcatenate, Dropout, Dense.
--
--   build/luon examples/text_cnn.lua [--num-embed 300] [--num-epochs 200]
--     [--batch-size 50] [--lr 0.0005] [--optimizer rmsprop] [--dropout 0.0] [--num-filter 100]
--     [--filter-list 3,4,5] [--disp-batches 50] [--gpus ""] [--seed 10]
--     [--corpus /usr/share/common-licenses] [--classes Apache-2.0,GPL-3,MPL-2.0,GFDL-1.3]
--     [--max-words 40]
--
-- The data: the original classifies movie-review sentences (rt-polarity, a
-- download) as positive or negative. This port classifies which licence a
-- sentence comes from, among the licence texts Debian's base-files installs
-- in /usr/share/common-licenses (Apache-2.0, GPL-3, MPL-2.0 and GFDL-1.3 by
-- default: about 480 sentences). A sentence is a run of text ending in . ; :
-- ? or ! with at least 5 words, cleaned and tokenised as the original's
-- data_helpers.clean_str, cut to --max-words and padded with "</s>"; the
-- vocabulary is ordered by frequency, as data_helpers.build_vocab. Shuffled
-- with --seed; a fifth is held out for validation (the original: 1000).
--
-- What it prints, as Module.fit with Speedometer:
--   Epoch[0] Batch [5]	Speed: 812.34 samples/sec	accuracy=0.412000
--   Epoch[0] Train-accuracy=0.450000
--   Epoch[0] Train-cross-entropy=1.213456     (luon's addition)
--   Epoch[0] Time cost=0.512
--   Epoch[0] Validation-accuracy=0.583333
--
-- Where this port differs from text_cnn.py:
-- - Gluon instead of the symbol API: Embedding + Reshape to (N,1,L,E) +
--   Convolution with kernel (w, E) + Pooling over (L-w+1, 1) is, exactly,
--   Conv1D of width w over (N,E,L) + GlobalMaxPool1D.
-- - Batches: a DataLoader over the shuffled set (last batch kept; NDArrayIter
--   pads it from the start); no checkpoints (--save-period) and no
--   --pretrained-embedding (word2vec is a download).
local luon = require("luon")
local cli = require("luon.cli")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn

local usage_text =
    "usage: luon examples/text_cnn.lua [--num-embed 300] [--num-epochs 200] [--batch-size 50] [--lr 0.0005]\n" ..
    "       [--optimizer rmsprop] [--dropout 0.0] [--num-filter 100] [--filter-list 3,4,5] [--disp-batches 50] [--gpus \"\"]\n" ..
    "       [--seed 10] [--corpus DIR] [--classes A,B,...] [--max-words 40]"

local args, usage = cli.options(arg, {num_embed = 300, num_epochs = 200, batch_size = 50, lr = 0.0005,
                                      optimizer = "rmsprop", dropout = 0.0, num_filter = 100, filter_list = "3,4,5",
                                      disp_batches = 50, gpus = "", seed = 10, corpus = "/usr/share/common-licenses",
                                      classes = "Apache-2.0,GPL-3,MPL-2.0,GFDL-1.3", max_words = 40}, usage_text,
                                {positive = {"num_embed", "num_epochs", "batch_size", "num_filter", "disp_batches",
                                             "max_words"}})
local filter_list = {}
for w in args.filter_list:gmatch("[^,]+") do
  local v = tonumber(w)
  if not v or v < 1 or v % 1 ~= 0 or v > args.max_words then
    usage(("--filter-list: widths must be integers from 1 to --max-words (%d), got %s"):format(args.max_words, w))
  end
  filter_list[#filter_list + 1] = v
end
if #filter_list == 0 then usage("--filter-list: no widths given") end
local classes = {}
for c in args.classes:gmatch("[^,]+") do classes[#classes + 1] = c end
if #classes < 2 then usage("--classes: at least two files of --corpus are needed, got " .. args.classes) end
np.random.seed(args.seed)

---------------------------------------------------------------------------
-- data_helpers: sentences, labels, vocabulary

-- The original's clean_str: keep letters, digits and (),!?'` ; split
-- contractions and punctuation off as tokens; lower case.
local function clean_str(s)
  s = s:gsub("[^A-Za-z0-9(),!?'`]", " ")
  s = s:gsub("'s", " 's"):gsub("'ve", " 've"):gsub("n't", " n't"):gsub("'re", " 're")
  s = s:gsub("'d", " 'd"):gsub("'ll", " 'll")
  s = s:gsub(",", " , "):gsub("!", " ! "):gsub("%(", " ( "):gsub("%)", " ) "):gsub("%?", " ? ")
  return s:lower()
end

local function load_data_and_labels()
  local x_text, y = {}, {}
  for label, name in ipairs(classes) do
    local path = args.corpus .. "/" .. name
    local f = io.open(path, "r")
    if not f then usage(("--classes: cannot read %s"):format(path)) end
    local text = f:read("*a"):gsub("%s+", " ")
    f:close()
    for sentence in text:gmatch("[^.;:!?]+[.;:!?]?") do
      local words = {}
      for w in clean_str(sentence):gmatch("%S+") do words[#words + 1] = w end
      if #words >= 5 then
        x_text[#x_text + 1], y[#y + 1] = words, label - 1
      end
    end
  end
  return x_text, y
end

-- Cut to max_words, pad with "</s>" (the original pads to the longest).
local function pad_sentences(sentences, padding_word)
  for _, s in ipairs(sentences) do
    for k = #s, args.max_words + 1, -1 do s[k] = nil end
    for k = #s + 1, args.max_words do s[k] = padding_word end
  end
  return sentences
end

-- Word -> index, most frequent first (ties by word, for a stable order).
local function build_vocab(sentences)
  local counts, words = {}, {}
  for _, s in ipairs(sentences) do
    for _, w in ipairs(s) do
      if not counts[w] then words[#words + 1] = w end
      counts[w] = (counts[w] or 0) + 1
    end
  end
  table.sort(words, function(a, b) return counts[a] > counts[b] or (counts[a] == counts[b] and a < b) end)
  local vocab = {}
  for k, w in ipairs(words) do vocab[w] = k - 1 end
  return vocab, words
end

local function load_data()
  local sentences, labels = load_data_and_labels()
  sentences = pad_sentences(sentences, "</s>")
  local vocab, vocab_inv = build_vocab(sentences)
  local x = {}
  for k, s in ipairs(sentences) do
    local row = {}
    for j, w in ipairs(s) do row[j] = vocab[w] end
    x[k] = row
  end
  return x, labels, vocab, vocab_inv
end

local function data_iter(batch_size)
  print("Loading data...")
  local x, y, _, vocab_inv = load_data()
  -- randomly shuffle data (on luon's generator, seeded by --seed)
  local n = #y
  local perm = np.arange(n)
  np.random.shuffle(perm)
  perm = perm:totable()
  local xs, ys = {}, {}
  for k = 1, n do xs[k], ys[k] = x[perm[k] + 1], y[perm[k] + 1] end
  local n_dev = math.max(1, math.floor(n / 5))
  local x_train, y_train, x_dev, y_dev = {}, {}, {}, {}
  for k = 1, n - n_dev do x_train[k], y_train[k] = xs[k], ys[k] end
  for k = n - n_dev + 1, n do x_dev[#x_dev + 1], y_dev[#y_dev + 1] = xs[k], ys[k] end
  print(("Train/Valid split: %d/%d"):format(#y_train, #y_dev))
  print(("train shape: (%d, %d)"):format(#y_train, args.max_words))
  print(("valid shape: (%d, %d)"):format(#y_dev, args.max_words))
  print("sentence max words", args.max_words)
  print("embedding size", args.num_embed)
  print("vocab size", #vocab_inv)
  local function dataset(xt, yt)
    return gluon.data.ArrayDataset(np.array(xt, {dtype = "int32"}), np.array(yt, {dtype = "int32"}))
  end
  local train_set = gluon.data.DataLoader(dataset(x_train, y_train), {batch_size = batch_size, shuffle = true})
  local valid = gluon.data.DataLoader(dataset(x_dev, y_dev), {batch_size = batch_size})
  return train_set, valid, args.max_words, args.num_embed, #vocab_inv
end

---------------------------------------------------------------------------
-- The network (sym_gen as Gluon blocks)

local function net_gen(vocabulary_size, num_embed, num_label, filters, num_filter, dropout)
  local net = nn.HybridSequential()
  -- embedding layer: (N, L) -> (N, L, E), then (N, E, L) for the convolutions
  net:add(nn.Embedding(vocabulary_size, num_embed))
  net:add(nn.HybridLambda(function(x) return np.transpose(x, {0, 2, 1}) end))
  -- a convolution + (max) pooling branch per filter width, outputs side by side
  local pooled_outputs = nn.HybridConcatenate{axis = 1}
  for _, filter_size in ipairs(filters) do
    local branch = nn.HybridSequential()
    branch:add(nn.Conv1D(num_filter, filter_size, {activation = "relu"}),
               nn.GlobalMaxPool1D(),
               nn.Flatten())
    pooled_outputs:add(branch)
  end
  net:add(pooled_outputs)
  -- dropout layer
  if dropout > 0 then net:add(nn.Dropout(dropout)) end
  -- fully connected
  net:add(nn.Dense(num_label))
  return net
end

local function train(net, train_iterator, valid_iterator, devs)
  net:initialize(luon.init.Uniform(0.1), {device = devs})
  local trainer = gluon.Trainer(net:collect_params(), args.optimizer, {learning_rate = args.lr})
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local acc = gluon.metric.Accuracy()
  for epoch = 0, args.num_epochs - 1 do
    local tic, btic = luon.clock(), luon.clock()
    acc:reset()
    local loss_sum, seen = 0, 0
    for nbatch, batch in train_iterator:enumerate() do
      local data, label = batch[1]:as_in_context(devs), batch[2]:as_in_context(devs)
      local out, l = autograd.record(function()
        local o = net(data)
        return o, loss_fn(o, label)
      end)
      l:backward()
      trainer:step(data.shape[1])
      acc:update({label}, {out})
      loss_sum, seen = loss_sum + l:sum():item(), seen + data.shape[1]
      if nbatch % args.disp_batches == 0 then
        local _, a = acc:get()
        print(("Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec\taccuracy=%f"):format(
          epoch, nbatch, args.disp_batches * args.batch_size / (luon.clock() - btic), a))
        btic = luon.clock()
      end
    end
    local _, a = acc:get()
    print(("Epoch[%d] Train-accuracy=%f"):format(epoch, a))
    print(("Epoch[%d] Train-cross-entropy=%f"):format(epoch, loss_sum / seen))
    print(("Epoch[%d] Time cost=%.3f"):format(epoch, luon.clock() - tic))
    local vacc = gluon.metric.Accuracy()
    for data, label in valid_iterator do
      vacc:update({label:as_in_context(devs)}, {net(data:as_in_context(devs))})
    end
    local _, va = vacc:get()
    print(("Epoch[%d] Validation-accuracy=%f"):format(epoch, va))
  end
end

local train_iter, valid_iter, _, embed_size, vocab_size = data_iter(args.batch_size)
local net = net_gen(vocab_size, embed_size, #classes, filter_list, args.num_filter, args.dropout)
local devs = args.gpus ~= "" and npx.gpu(tonumber(args.gpus:match("^%d+")) or 0) or npx.cpu()
train(net, train_iter, valid_iter, devs)
