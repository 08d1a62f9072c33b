//===- ParamServerLoop.cpp - the parameter servers' loop ------------------===//
//
// `train` under --sync ps|async: servers hold the weights in shards and
// apply the workers' gradients; workers compute them.
//
//===----------------------------------------------------------------------===//

#include "TrainInternal.h"

namespace distopt::runtime::train {

namespace {

// --- Parameter servers (--sync ps|async) ---------------------------------
//
// Ranks [0, K) are servers, the rest workers (manifest
// "parameter_servers"). Every message between a worker and a server is one
// buffer of floats: a header of 8 doubles, then the server's shard
// (shard_length floats; a worker's gradient pieces or a server's weights).
// Each push gets exactly one reply; a worker that is told to stop sends
// every server a last message ("bye"), so no message is left unreceived.

constexpr int64_t kHeaderFloats = 16; // 8 doubles

enum : int { kPushGradient = 0, kPushBye = 1 };

enum : int { kReplyWeights = 0, kReplyStop = 1 };

struct PsMessage {
  std::vector<float> buf;
  explicit PsMessage(int64_t shard) : buf(kHeaderFloats + shard, 0.0f) {}
  double get(int i) const {
    double v;
    std::memcpy(&v, buf.data() + 2 * i, sizeof v);
    return v;
  }
  void set(int i, double v) { std::memcpy(buf.data() + 2 * i, &v, sizeof v); }
  float *payload() { return buf.data() + kHeaderFloats; }
  const float *payload() const { return buf.data() + kHeaderFloats; }
  int64_t count() const { return static_cast<int64_t>(buf.size()); }
};

/// Sends that must outlive the call (MPI_Isend on a copy), completed in
/// order as they finish and all at the end.
struct Outbox {
  std::deque<std::pair<std::vector<float>, dort_request *>> sends;
  bool send(const PsMessage &msg, int peer, dort_comm *c, std::string &error) {
    reap();
    sends.emplace_back(msg.buf, nullptr);
    if (dort_isend(sends.back().first.data(), msg.count(), DORT_F32, peer, c,
                   &sends.back().second) != 0) {
      error = dort_last_error_message();
      return false;
    }
    return true;
  }
  void reap() {
    while (!sends.empty()) {
      int done = 0;
      if (dort_test(sends.front().second, &done) != 0 || !done)
        return;
      sends.pop_front();
    }
  }
  bool flush(std::string &error) {
    for (auto &s : sends)
      if (dort_wait(s.second) != 0) {
        error = dort_last_error_message();
        return false;
      }
    sends.clear();
    return true;
  }
};

} // namespace

void sleepSeconds(double s) {
  if (s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

double stragglerDelay(const std::vector<ps::Straggler> &stragglers,
                      int64_t rank, int64_t step) {
  for (const ps::Straggler &s : stragglers)
    if (s.rank == rank) {
      if (!s.random)
        return s.seconds;
      uint64_t u = splitmix64(static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull +
                              static_cast<uint64_t>(step));
      return 2.0 * s.seconds * double(u >> 11) / double(uint64_t(1) << 53);
    }
  return 0;
}

int runParameterServers(TrainArgs &a, const Manifest &m,
                        const std::string &bundleDir, EntryFn workerEntry) {
  const ParameterServers &p = *m.parameterServers;
  std::string error;
  bool async = p.sync == "async";
  if (a.asyncGiven && !async)
    return fail(a, "--max-staleness, --drop-stale, --stale-lr, --sync-warmup "
                   "and --delay-compensation are cures for asynchronous "
                   "servers: compile with --sync async");
  if (!a.checkpointDir.empty() || !a.resume.empty())
    return fail(a, "--checkpoint-dir and --resume are not built for "
                   "parameter-server runs yet (save the result with "
                   "--save-weights or --save-onnx)");
  if (!a.trace.empty())
    return fail(a, "--trace is not built for parameter-server runs yet (the "
                   "log has each worker's wait and the staleness)");
  if (a.accumulate > 0 && a.accumulate != 1)
    return fail(a, "--accumulate: parameter servers apply each batch's "
                   "gradient");
  if (async && p.servers > 1 && a.hyper["clip_norm"] > 0)
    return fail(a, "--clip-grad-norm needs the norm of the whole gradient; "
                   "asynchronous servers apply their shards independently "
                   "(use one server, or --sync ps)");
  if (!ps_entry())
    return fail(a, "this executable has no parameter-server update program "
                   "(recompile the bundle)");
  int64_t launched = launchedRanks();
  if (launched != m.ranks)
    return fail(a, "this bundle was compiled for " + std::to_string(m.ranks) +
                       " ranks (" + std::to_string(p.servers) +
                       " parameter server(s) and " + std::to_string(p.workers) +
                       " workers), but it was launched on " +
                       std::to_string(launched) + "; run it with `mpirun -np " +
                       std::to_string(m.ranks) + "`");
  if (dort_comm_init(nullptr, nullptr) != 0)
    return fail(a, dort_last_error_message());
  gJob.distributed = true;
  dort_comm *world = dort_comm_world();
  gJob.rank = dort_comm_rank(world);
  int64_t rank = gJob.rank, K = p.servers, W = p.workers;
  bool server = rank < K;
  int64_t me = server ? rank : rank - K;
  a.program += ": rank " + std::to_string(rank) +
               (server ? " (server " + std::to_string(me) + ")"
                       : " (worker " + std::to_string(me) + ")");
  signal(SIGTERM, onTerminate);
  dort_comm *group = nullptr;
  if (dort_comm_split(world, server ? 0 : 1, static_cast<int>(rank), &group) != 0)
    return fail(a, dort_last_error_message());
  std::vector<int64_t> serverGrid{1, 1, K};
  const std::vector<int64_t> &grid = server ? serverGrid : m.grid;
  if (dort_grid_init_on(group, 3, grid.data()) != 0)
    return fail(a, dort_last_error_message());
  gJob.grid = grid;
  gJob.coords = gridCoords(grid, me);
  Fault fault;
  if (!parseFault(fault, error))
    return fail(a, error);

  // Roles of the step's inputs and outputs.
  std::vector<size_t> dataInputs, keyInputs;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    if (m.inputs[i].name == "rng.key")
      keyInputs.push_back(i);
    else
      dataInputs.push_back(i);
  }
  DataSet dataSet;
  if (!dataSet.open(m.inputs, dataInputs, a.data, "the step's", error))
    return fail(a, error);
  int64_t samples = dataSet.samples, batch = dataSet.batch;
  int64_t steps = 0;
  if (!stepsToRun(a, samples, batch, steps, error))
    return fail(a, error);
  int64_t perEpoch = samples / batch;
  int64_t L = p.shardLength;
  WeightStore store;
  std::vector<Tensor> weights;
  if (!loadWeights(m, bundleDir, store, weights, error))
    return fail(a, error);
  dort_set_num_threads(0);
  auto elapsedSince = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  };
  auto start = std::chrono::steady_clock::now();
  bool ok = true;

  if (!server) {
    // --- A worker: pull, compute the gradient of its batch, push. -------
    std::map<std::string, size_t> outputIndex;
    for (size_t i = 0; i < m.outputs.size(); ++i)
      outputIndex[m.outputs[i].name] = i;
    if (!outputIndex.count("loss") || !outputIndex.count("counted"))
      return fail(a, "the worker program returns no loss and count");
    std::vector<int64_t> gradOut(m.weights.size(), -1);
    for (size_t w = 0; w < m.weights.size(); ++w) {
      auto o = outputIndex.find("grad:" + m.weights[w].name);
      if (o != outputIndex.end())
        gradOut[w] = static_cast<int64_t>(o->second);
    }
    std::vector<Tensor> inputs(m.inputs.size()), wholeBatch(m.inputs.size()),
        outputs(m.outputs.size());
    for (size_t i = 0; i < m.inputs.size(); ++i)
      if (!Tensor::create(m.inputs[i].dtype, m.inputs[i].shape, inputs[i], error) ||
          (!m.inputs[i].splitAxes.empty() &&
           !Tensor::create(m.inputs[i].dtype, m.inputs[i].fileShape(),
                           wholeBatch[i], error)))
        return fail(a, "input '" + m.inputs[i].name + "': " + error);
    for (size_t o = 0; o < m.outputs.size(); ++o)
      if (!Tensor::create(m.outputs[o].dtype, m.outputs[o].shape, outputs[o], error))
        return fail(a, "output '" + m.outputs[o].name + "': " + error);
    std::vector<void *> buffers;
    for (Tensor &t : inputs)
      buffers.push_back(t.data());
    for (Tensor &t : weights)
      buffers.push_back(t.data());
    for (Tensor &t : outputs)
      buffers.push_back(t.data());
    const float *loss = static_cast<const float *>(outputs[outputIndex["loss"]].data());
    const float *counted =
        static_cast<const float *>(outputs[outputIndex["counted"]].data());
    std::vector<PsMessage> replies(K, PsMessage(L));
    std::vector<int64_t> pulled(K, 0);
    Outbox outbox;
    std::vector<int64_t> order(samples);
    std::iota(order.begin(), order.end(), 0);
    int64_t shuffledEpoch = -1;
    double waitSeconds = 0, computeSeconds = 0;
    // Pull: one reply from each server, its pieces into the weights.
    auto pull = [&](bool &stop) {
      double t0 = trace::now();
      stop = false;
      for (int64_t s = 0; s < K; ++s) {
        if (dort_recv(replies[s].buf.data(), replies[s].count(), DORT_F32,
                      static_cast<int>(s), world, nullptr) != 0) {
          error = dort_last_error_message();
          return false;
        }
        stop = stop || int(replies[s].get(0)) == kReplyStop;
        pulled[s] = static_cast<int64_t>(replies[s].get(1));
      }
      for (const ServerPiece &piece : p.pieces)
        std::memcpy(static_cast<float *>(weights[piece.weight].data()) + piece.offset,
                    replies[piece.server].payload() + piece.shardOffset,
                    piece.length * sizeof(float));
      // The weights changed under the program (a GPU had them cached).
      dort_device_host_changed();
      waitSeconds = trace::now() - t0;
      return true;
    };
    bool stop = false;
    if (!pull(stop))
      return fail(a, error);
    for (int64_t local = 0; !stop; ++local) {
      // Synchronous: the step is the version pulled (every worker takes its
      // block of that step's batch); asynchronous: the worker's own count.
      int64_t step = async ? local : pulled[0];
      injectFault(fault, rank, local + 1, a.program);
      int64_t epoch = step / perEpoch, within = step % perEpoch;
      if (a.shuffle && epoch != shuffledEpoch) {
        std::iota(order.begin(), order.end(), 0);
        std::mt19937_64 rng(a.seed * 1000003u + static_cast<uint64_t>(epoch));
        std::shuffle(order.begin(), order.end(), rng);
        shuffledEpoch = epoch;
      }
      std::vector<int64_t> rows(order.begin() + within * batch,
                                order.begin() + (within + 1) * batch);
      for (size_t i : dataInputs)
        dataSet.fill(i, m.inputs[i], rows, wholeBatch[i], inputs[i], m.grid,
                     gJob.coords);
      for (size_t i : keyInputs)
        *static_cast<int64_t *>(inputs[i].data()) =
            static_cast<int64_t>(stepKey(a.seed, step + 1));
      std::string context = "worker step " + std::to_string(local + 1);
      dort_set_context(context.c_str());
      prepareTerminatedMessage(a.program, local + 1);
      dort_clear_error();
      dort_clear_pending_error();
      double t0 = trace::now();
      std::string failure = entryFailure(workerEntry(buffers.data()));
      if (!failure.empty())
        return fail(a, "step " + std::to_string(local + 1) + " failed: " + failure);
      computeSeconds = trace::now() - t0;
      sleepSeconds(stragglerDelay(fault.stragglers, rank, local + 1));
      for (int64_t s = 0; s < K; ++s) {
        PsMessage msg(L);
        msg.set(0, kPushGradient);
        msg.set(1, double(me));
        msg.set(2, double(pulled[s]));
        msg.set(3, *loss);
        msg.set(4, *counted);
        msg.set(5, waitSeconds);
        msg.set(6, computeSeconds);
        msg.set(7, double(local));
        for (const ServerPiece &piece : p.pieces)
          if (piece.server == s)
            std::memcpy(msg.payload() + piece.shardOffset,
                        static_cast<const float *>(outputs[gradOut[piece.weight]].data()) +
                            piece.offset,
                        piece.length * sizeof(float));
        if (!outbox.send(msg, static_cast<int>(s), world, error))
          return fail(a, error);
      }
      if (!pull(stop))
        return fail(a, error);
    }
    for (int64_t s = 0; s < K; ++s) {
      PsMessage bye(L);
      bye.set(0, kPushBye);
      bye.set(1, double(me));
      if (!outbox.send(bye, static_cast<int>(s), world, error))
        return fail(a, error);
    }
    ok = outbox.flush(error);
  } else {
    // --- A server: its shard, the update program, the workers' pushes. ---
    const std::vector<TensorSpec> &ins = p.updateInputs, &outs = p.updateOutputs;
    std::map<std::string, size_t> inIndex, outIndex;
    for (size_t i = 0; i < ins.size(); ++i)
      inIndex[ins[i].name] = i;
    for (size_t o = 0; o < outs.size(); ++o)
      outIndex[outs[o].name] = o;
    std::string shardName = "ps.shard";
    for (const char *need : {"ps.grad", "ps.pulled", "ps.dc_lambda"})
      if (!inIndex.count(need))
        return fail(a, std::string("the update program has no input '") + need + "'");
    if (!outIndex.count("update:" + shardName) || !outIndex.count("grad_norm"))
      return fail(a, "the update program returns no updated shard");
    std::vector<Tensor> uIn(ins.size()), uOut(outs.size());
    Tensor shard;
    for (size_t i = 0; i < ins.size(); ++i)
      if (!Tensor::create(ins[i].dtype, ins[i].shape, uIn[i], error))
        return fail(a, error);
    for (size_t o = 0; o < outs.size(); ++o)
      if (!Tensor::create(outs[o].dtype, outs[o].shape, uOut[o], error))
        return fail(a, error);
    if (!Tensor::create(DType::Float32, {L}, shard, error))
      return fail(a, error);
    std::vector<std::pair<size_t, size_t>> stateIO;
    std::vector<std::pair<size_t, std::string>> hyper;
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string &n = ins[i].name;
      if (n.rfind("opt.", 0) == 0 &&
          !addOptimizerInput(i, n, outIndex, stateIO, hyper, error))
        return fail(a, error);
    }
    float *shardData = static_cast<float *>(shard.data());
    for (const ServerPiece &piece : p.pieces)
      if (piece.server == me)
        std::memcpy(shardData + piece.shardOffset,
                    static_cast<const float *>(weights[piece.weight].data()) +
                        piece.offset,
                    piece.length * sizeof(float));
    std::vector<void *> buffers;
    auto rebind = [&] {
      buffers.clear();
      for (Tensor &t : uIn)
        buffers.push_back(t.data());
      buffers.push_back(shard.data());
      for (Tensor &t : uOut)
        buffers.push_back(t.data());
    };
    rebind();
    float *const grad = static_cast<float *>(uIn[inIndex["ps.grad"]].data());
    float *const pulledIn = static_cast<float *>(uIn[inIndex["ps.pulled"]].data());
    float *const lambda = static_cast<float *>(uIn[inIndex["ps.dc_lambda"]].data());
    const float *const normOut = static_cast<const float *>(uOut[outIndex["grad_norm"]].data());
    size_t updateOut = outIndex["update:" + shardName];
    int64_t version = 0, applied = 0;
    // Applies `g` (with the weights it was computed on, for DC-ASGD) at
    // learning-rate scale `lrScale`; the update becomes the shard.
    auto apply = [&](const float *g, const float *pulledW, double dc,
                     double lrScale, int64_t step) {
      std::memcpy(grad, g, L * sizeof(float));
      std::memcpy(pulledIn, pulledW ? pulledW : shardData, L * sizeof(float));
      *lambda = static_cast<float>(dc);
      double lr = scheduledLr(a, step, steps) * lrScale;
      for (auto &[i, name] : hyper) {
        double v = name == "step" ? double(applied + 1) : name == "lr" ? lr : 0.0;
        if (name != "step" && name != "lr") {
          auto h = a.hyper.find(name);
          if (h == a.hyper.end()) {
            error = "the update takes a hyperparameter '" + name +
                    "' this runtime does not know";
            return false;
          }
          v = h->second;
        }
        *static_cast<float *>(uIn[i].data()) = static_cast<float>(v);
      }
      dort_clear_error();
      dort_clear_pending_error();
      std::string failure = entryFailure(ps_entry()(buffers.data()));
      if (!failure.empty()) {
        error = "the update failed: " + failure;
        return false;
      }
      std::swap(shard, uOut[updateOut]);
      shardData = static_cast<float *>(shard.data());
      // Only the shard and the optimizer state change buffers; the
      // gradient, pulled weights, λ and the norm keep theirs.
      for (auto &[i, o] : stateIO)
        std::swap(uIn[i], uOut[o]);
      rebind();
      ++applied;
      return true;
    };
    Outbox outbox;
    // This server's traffic: messages received and sent (the log's
    // per-server bytes).
    int64_t messagesIn = 0, messagesOut = 0;
    auto reply = [&](int64_t worker, int kind) {
      ++messagesOut;
      PsMessage msg(L);
      msg.set(0, kind);
      msg.set(1, double(version));
      std::memcpy(msg.payload(), shardData, L * sizeof(float));
      return outbox.send(msg, static_cast<int>(K + worker), world, error);
    };
    // The whole weights on server 0 (evaluation, saving): every server's
    // shard gathered, its pieces put back.
    auto gatherWeights = [&]() {
      std::vector<float> all(me == 0 ? K * L : 0);
      if (dort_gather(shardData, all.data(), L, DORT_F32, 0, group) != 0) {
        error = dort_last_error_message();
        return false;
      }
      if (me == 0)
        for (const ServerPiece &piece : p.pieces)
          std::memcpy(static_cast<float *>(weights[piece.weight].data()) + piece.offset,
                      all.data() + piece.server * L + piece.shardOffset,
                      piece.length * sizeof(float));
      return true;
    };
    std::unique_ptr<Evaluator> evaluator;
    if (!a.evalData.empty()) {
      if (!m.eval || !gEvalEntry)
        return fail(a, "--eval-data: this bundle has no evaluation program");
      evaluator = std::make_unique<Evaluator>(m, *m.eval);
      if (!evaluator->open(a.evalData, error))
        return fail(a, "--eval-data: " + error);
    }
    std::ofstream log;
    if (!a.log.empty() && me == 0) {
      log.open(a.log, std::ios::trunc);
      if (!log)
        return fail(a, "cannot write the log '" + a.log + "'");
    }
    ps::StalenessHistogram histogram;
    std::vector<double> waits(W, 0.0);
    std::string serverBytes = "[]"; // [[in, out], ...] per server
    // Dropped by a rule (backups, --drop-stale); pushed after the last step.
    int64_t dropped = 0, droppedTotal = 0, unapplied = 0, byes = 0;
    std::vector<bool> finished(W, false);
    // One log line (server 0) per synchronous step, or per W gradients
    // received asynchronously.
    double lineLoss = 0, lineCounted = 0, lineStaleSum = 0, lastLine = 0;
    int64_t lineApplied = 0, lineGradients = 0, lineStaleMax = 0;
    double norm = 0;
    auto logLine = [&](int64_t step) {
      double now = elapsedSince(start);
      std::string evalFields;
      if (evaluator && ((a.evalEvery > 0 && step % a.evalEvery == 0) ||
                        step == steps)) {
        if (!gatherWeights())
          return false;
        if (me == 0) {
          double evalLoss, accuracy;
          std::vector<int64_t> none;
          dort_device_host_changed(); // the gathered weights are new
          if (!evaluator->run(gEvalEntry, weights, none, evalLoss, accuracy, error))
            return false;
          evalFields = ", \"eval_loss\": " + jsonNumber(evalLoss);
          if (accuracy >= 0)
            evalFields += ", \"eval_accuracy\": " + jsonNumber(accuracy);
          std::fprintf(stderr, "%s: step %lld: eval loss %.6g%s\n",
                       a.program.c_str(), static_cast<long long>(step), evalLoss,
                       accuracy >= 0
                           ? (", accuracy " + std::to_string(accuracy)).c_str()
                           : "");
        }
      }
      double lossValue = lineCounted > 0 ? lineLoss / lineCounted : 0.0;
      if (log) {
        log << "{\"step\": " << step << ", \"loss\": " << jsonNumber(lossValue)
            << ", \"lr\": " << jsonNumber(scheduledLr(a, step - 1, steps))
            << ", \"grad_norm\": " << jsonNumber(norm)
            << ", \"samples_per_s\": "
            << jsonNumber(now > 0 ? double(step * batch) / now : 0.0)
            << ", \"step_s\": " << jsonNumber(now - lastLine)
            << ", \"applied\": " << lineApplied << ", \"dropped\": " << dropped
            << ", \"staleness_mean\": "
            << jsonNumber(lineGradients ? lineStaleSum / double(lineGradients) : 0.0)
            << ", \"staleness_max\": " << lineStaleMax << ", \"wait_s\": [";
        for (int64_t w = 0; w < W; ++w)
          log << (w ? ", " : "") << jsonNumber(waits[w]);
        log << "], \"elapsed_s\": " << jsonNumber(now) << evalFields << "}\n";
      }
      if (me == 0 && (step == steps || step % std::max<int64_t>(1, steps / 10) == 0))
        std::fprintf(stderr, "%s: step %lld/%lld loss %.6g (%.0f samples/s)\n",
                     a.program.c_str(), static_cast<long long>(step),
                     static_cast<long long>(steps), lossValue,
                     now > 0 ? double(step * batch) / now : 0.0);
      if (!std::isfinite(lossValue))
        return error = "the loss is " + numberText(lossValue) + " at step " +
                       std::to_string(step) + "; stopped",
               false;
      lastLine = now;
      lineLoss = lineCounted = lineStaleSum = 0;
      lineApplied = lineGradients = lineStaleMax = dropped = 0;
      return true;
    };
    auto checkFault = [&](int64_t step) {
      injectFault(fault, rank, step, a.program);
      std::string context = "server step " + std::to_string(step);
      dort_set_context(context.c_str());
      prepareTerminatedMessage(a.program, step);
    };
    PsMessage in(L);
    int source = -1;
    auto receive = [&]() {
      if (dort_recv_any(in.buf.data(), in.count(), DORT_F32, world, &source) != 0) {
        error = dort_last_error_message();
        return false;
      }
      ++messagesIn;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (source != K + w) {
        error = "a message from rank " + std::to_string(source) +
                " claims to be worker " + std::to_string(w);
        return false;
      }
      if (int(in.get(0)) == kPushBye) {
        finished[w] = true;
        ++byes;
      } else {
        waits[w] = in.get(5);
      }
      return true;
    };
    for (int64_t w = 0; w < W && ok; ++w)
      ok = reply(w, kReplyWeights);
    if (!ok)
      return fail(a, error);
    int64_t N = W - p.backupWorkers;
    std::vector<std::vector<float>> grads(W);
    std::vector<double> losses(W), counts(W);
    // A synchronous step: N gradients of this version (the first to arrive
    // when there are backups; server 0 chooses, the others follow), their
    // average by counted labels, one update; every push gets its reply.
    auto syncStep = [&](int64_t step) {
      std::vector<int64_t> arrivals, waiting;
      std::vector<bool> have(W, false);
      std::vector<int64_t> chosen;
      bool decided = p.backupWorkers == 0;
      if (decided)
        for (int64_t w = 0; w < W; ++w)
          chosen.push_back(w);
      auto complete = [&] {
        return decided && std::all_of(chosen.begin(), chosen.end(),
                                      [&](int64_t w) { return have[w]; });
      };
      // Followers learn server 0's choice first.
      if (!decided && me != 0) {
        std::vector<uint8_t> mask(W, 0);
        if (dort_broadcast(mask.data(), mask.data(), W, DORT_U8, 0, group,
                           nullptr) != 0) {
          error = dort_last_error_message();
          return false;
        }
        for (int64_t w = 0; w < W; ++w)
          if (mask[w])
            chosen.push_back(w);
        decided = true;
      }
      while (!complete()) {
        if (!receive())
          return false;
        int64_t w = static_cast<int64_t>(in.get(1));
        if (finished[w])
          continue;
        if (static_cast<int64_t>(in.get(2)) != version) {
          // A late gradient of an earlier step: dropped, and its worker
          // goes on from the newest weights.
          ++dropped;
          ++droppedTotal;
          if (!reply(w, kReplyWeights))
            return false;
          continue;
        }
        have[w] = true;
        grads[w].assign(in.payload(), in.payload() + L);
        losses[w] = in.get(3);
        counts[w] = in.get(4);
        waiting.push_back(w);
        arrivals.push_back(w);
        if (!decided && static_cast<int64_t>(arrivals.size()) >= N) {
          chosen = ps::firstToArrive(arrivals, N);
          std::vector<uint8_t> mask(W, 0);
          for (int64_t c : chosen)
            mask[c] = 1;
          if (K > 1 && dort_broadcast(mask.data(), mask.data(), W, DORT_U8, 0,
                                      group, nullptr) != 0) {
            error = dort_last_error_message();
            return false;
          }
          decided = true;
        }
      }
      double total = 0;
      for (int64_t w : chosen)
        total += counts[w];
      std::vector<float> sum(L, 0.0f);
      for (int64_t w : chosen) {
        // Each gradient is its batch's mean: weighted by its share of the
        // counted labels, the sum is the mean over the step's batch.
        float weight = static_cast<float>(total > 0 ? counts[w] / total
                                                    : 1.0 / double(chosen.size()));
        const float *g = grads[w].data();
        for (int64_t i = 0; i < L; ++i)
          sum[i] += weight * g[i];
        lineLoss += losses[w] * (total > 0 ? counts[w] : 1.0);
        lineCounted += total > 0 ? counts[w] : 1.0;
        histogram.add(0);
        ++lineGradients;
      }
      int64_t late = static_cast<int64_t>(waiting.size() - chosen.size());
      dropped += late;
      droppedTotal += late;
      if (!apply(sum.data(), nullptr, 0.0, 1.0, step))
        return false;
      norm = *normOut;
      lineApplied += static_cast<int64_t>(chosen.size());
      ++version;
      bool last = step + 1 == steps;
      for (int64_t w : waiting)
        if (!reply(w, last ? kReplyStop : kReplyWeights))
          return false;
      return true;
    };

    int64_t received = 0; // asynchronous: gradients taken
    std::vector<int64_t> clocks(W, 0);
    std::vector<std::vector<float>> pulledCopy(
        a.async.delayCompensation > 0 ? W : 0, std::vector<float>(shardData, shardData + L));
    std::vector<int64_t> deferred;
    auto asyncReply = [&](int64_t w, bool stop) {
      if (!reply(w, stop ? kReplyStop : kReplyWeights))
        return false;
      if (!pulledCopy.empty())
        pulledCopy[w].assign(shardData, shardData + L);
      return true;
    };
    auto activeClocks = [&] {
      std::vector<int64_t> c;
      for (int64_t w = 0; w < W; ++w)
        if (!finished[w])
          c.push_back(clocks[w]);
      return c;
    };
    int64_t step = 0;
    while (ok && step < steps && byes < W) {
      checkFault(step + 1);
      if (!async || ps::inWarmup(a.async, step)) {
        ok = syncStep(step);
        if (ok) {
          received += W;
          ++step;
          ok = logLine(step);
        }
        if (async && ok && !ps::inWarmup(a.async, step) && step < steps)
          for (int64_t w = 0; w < W; ++w)
            clocks[w] = step;
        continue;
      }
      // Asynchronous: each gradient when it arrives.
      if (!(ok = receive()))
        break;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (finished[w])
        continue;
      ++received;
      ++clocks[w];
      ps::Decision d = ps::decide(a.async, version, static_cast<int64_t>(in.get(2)));
      histogram.add(d.staleness);
      ++lineGradients;
      lineStaleSum += double(d.staleness);
      lineStaleMax = std::max(lineStaleMax, d.staleness);
      double c = in.get(4);
      lineLoss += in.get(3) * c;
      lineCounted += c;
      if (d.apply) {
        if (!(ok = apply(in.payload(),
                         pulledCopy.empty() ? nullptr : pulledCopy[w].data(),
                         a.async.delayCompensation, d.lrScale, step)))
          break;
        norm = *normOut;
        ++version;
        ++lineApplied;
      } else {
        ++dropped;
        ++droppedTotal;
      }
      bool stepDone = received % W == 0;
      if (stepDone)
        ++step;
      bool stop = step >= steps;
      // Bounded staleness: a worker too far ahead of the slowest waits for
      // its reply.
      deferred.push_back(w);
      std::vector<int64_t> still;
      for (int64_t v : deferred) {
        if (!stop && !ps::mayProceed(a.async, clocks[v], activeClocks()))
          still.push_back(v);
        else if (!(ok = asyncReply(v, stop)))
          break;
      }
      deferred = std::move(still);
      if (ok && stepDone)
        ok = logLine(step);
    }
    // Whoever is still deferred (bounded staleness) is told to stop.
    for (int64_t v : deferred)
      if (ok)
        ok = asyncReply(v, true);
    // Until every worker has said goodbye: late pushes are answered with
    // stop.
    while (ok && byes < W) {
      if (!(ok = receive()))
        break;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (int(in.get(0)) == kPushGradient && !finished[w]) {
        ++unapplied;
        ok = reply(w, kReplyStop);
      }
    }
    ok = ok && outbox.flush(error);
    // Every server's bytes in and out per step, to server 0's summary.
    double bytesPerMessage = double(kHeaderFloats + L) * sizeof(float);
    std::vector<double> traffic{double(messagesIn) * bytesPerMessage / double(steps),
                                double(messagesOut) * bytesPerMessage / double(steps)},
        allTraffic(me == 0 ? 2 * K : 0);
    if (ok && dort_gather(traffic.data(), allTraffic.data(), 2, DORT_F64, 0, group) != 0) {
      error = dort_last_error_message();
      ok = false;
    }
    if (ok && me == 0) {
      std::string bytes = "[";
      for (int64_t k = 0; k < K; ++k) {
        bytes += (k ? ", [" : "[") + jsonNumber(allTraffic[2 * k]) + ", " +
                 jsonNumber(allTraffic[2 * k + 1]) + "]";
        std::fprintf(stderr,
                     "%s: server %lld received %.0f and sent %.0f bytes per step\n",
                     a.program.c_str(), static_cast<long long>(k), allTraffic[2 * k],
                     allTraffic[2 * k + 1]);
      }
      serverBytes = bytes + "]";
    }
    if (ok && me == 0) {
      std::fprintf(stderr,
                   "%s: %lld updates, %lld gradients dropped, %lld pushed "
                   "after the last step; staleness mean %.2f, max %lld, "
                   "histogram %s\n",
                   a.program.c_str(), static_cast<long long>(applied),
                   static_cast<long long>(droppedTotal),
                   static_cast<long long>(unapplied), histogram.mean(),
                   static_cast<long long>(histogram.max), histogram.json().c_str());
      if (log)
        log << "{\"summary\": true, \"updates\": " << applied
            << ", \"dropped\": " << droppedTotal
            << ", \"after_last_step\": " << unapplied
            << ", \"server_bytes_per_step\": " << serverBytes
            << ", \"staleness_mean\": " << jsonNumber(histogram.mean())
            << ", \"staleness_max\": " << histogram.max
            << ", \"staleness_histogram\": " << histogram.json()
            << ", \"elapsed_s\": " << jsonNumber(elapsedSince(start)) << "}\n";
    }
    if (ok && (!a.saveOnnx.empty() || !a.saveWeights.empty()))
      ok = gatherWeights();
    if (ok && me == 0 && (!a.saveOnnx.empty() || !a.saveWeights.empty()))
      if (int rc = saveTrainedWeights(a, m, [&](size_t w) -> const Tensor & {
            return weights[w];
          }))
        return rc;
    if (log) {
      log.close();
      if (!log)
        return fail(a, "writing the log '" + a.log + "' failed");
    }
  }
  if (!ok)
    return fail(a, error);
  dort_grid_finalize();
  dort_comm_free(group);
  dort_comm_finalize();
  return 0;
}

} // namespace distopt::runtime::train
