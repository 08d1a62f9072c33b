//===- Train.cpp - the `train` mode of a training-step bundle -------------===//
//
//   model train --data NAME=FILE.npy ... --steps N | --epochs E
//               [--lr F] [--momentum F] [--betas A,B] [--eps F]
//               [--weight-decay F] [--clip-grad-norm F]
//               [--lr-schedule constant|cosine|linear] [--warmup-steps K]
//               [--init-scale S] [--growth-interval N]
//               [--shuffle SEED | --no-shuffle] [--log FILE.jsonl]
//               [--trace FILE.json]
//               [--save-weights DIR] [--save-onnx OUT.onnx] [--bundle DIR]
//
// A data-parallel bundle (compiled with --cluster/--dp) runs under mpirun
// on its ranks: every rank takes the same batches (the order depends on the
// seed alone) and keeps its share of each; rank 0 logs and writes. The log
// has per step the loss, the learning rate, the gradients' global norm,
// samples/s, the achieved FLOP/s of the whole job (the compiler's count of
// a step's FLOPs) and the time and share of the step the main thread spent
// waiting for communication. --trace writes a Chrome-trace timeline of
// every rank (steps, collectives with their bytes, waits).
//
// Failures end the job naming the rank and the step: a collective that
// times out says which step it was in; a rank the launcher terminates
// because another died says which step it was in. For tests and
// experiments, DISTOPT_FAULT=die:RANK:STEP or hang:RANK:STEP makes rank
// RANK kill itself (SIGKILL) or stop responding at the start of step STEP.
//
// A bundle compiled with `distopt compile --loss ... --optimizer ...` runs
// one training step per call of its entry (lib/Training/Optimizer.cpp).
// Its manifest names the roles by convention: inputs `opt.<hyper>` are the
// hyperparameters, `opt.<state>:<weight>` the optimizer state (zeros at the
// start; the output of the same name replaces it after each step), the
// other inputs are data (one `--data` file each, samples along axis 0);
// outputs `loss`, `grad_norm`, and `update:<weight>`, which replaces the
// weight. Weights start from the bundle's and are kept in memory.
//
// An fp16 step (dynamic loss scaling) also takes `opt.loss_scale` and
// returns `found_inf`: the loop keeps PyTorch GradScaler's state (the
// scale, from --init-scale; x0.5 and the step skipped -- the program left
// weights and state as they were, Adam's step count does not advance --
// when a gradient was not finite; x2 after --growth-interval good steps in
// a row), logs `loss_scale` and `skipped`, and checkpoints it
// (`amp.scaler`: scale, good steps in a row, optimizer steps taken).
//
//===----------------------------------------------------------------------===//


#include "TrainInternal.h"

namespace distopt::runtime::train {

namespace {

/// The parameter servers' update program (dort_set_ps_entry).
EntryFn gServerEntry = nullptr;

/// The message a rank prints when the launcher terminates it (another rank
/// failed): prepared before each step, written by the signal handler with
/// write(2) alone.
char gTerminatedMessage[256];

size_t gTerminatedLength = 0;

/// Joins the bundle's job: checks the launch has the bundle's rank count
/// and, for several ranks, initialises communication and the grid (this
/// rank's `coords` on it; zeros for one process).
bool joinJob(const Manifest &m, TrainArgs &a, std::vector<int64_t> &coords,
             std::string &error) {
  coords.assign(m.grid.size(), 0);
  gJob.grid = m.grid;
  gJob.coords = coords;
  int64_t launched = launchedRanks();
  if (launched != m.ranks) {
    error = "this bundle was compiled for " + std::to_string(m.ranks) +
            " rank" + (m.ranks == 1 ? "" : "s") + ", but it was launched on " +
            std::to_string(launched) +
            (m.ranks == 1 ? " (compile it with --cluster, or run it without "
                            "mpirun)"
                          : "; run it with `mpirun -np " +
                                std::to_string(m.ranks) + "`");
    return false;
  }
  if (m.ranks == 1)
    return true;
  if (dort_comm_init(nullptr, nullptr) != 0) {
    error = dort_last_error_message();
    return false;
  }
  gJob.distributed = true;
  gJob.rank = dort_comm_rank(dort_comm_world());
  a.program += ": rank " + std::to_string(gJob.rank);
  if (dort_grid_init(static_cast<int>(m.grid.size()), m.grid.data()) != 0) {
    error = dort_last_error_message();
    return false;
  }
  coords = gridCoords(m.grid, gJob.rank);
  gJob.coords = coords;
  return holdsProgramOf(m, gJob.rank, error);
}

/// Writes the timeline of every rank to a.trace (Chrome's trace event
/// format, one process per rank): rank 0 gathers the others' events.
bool writeTrace(const TrainArgs &a, std::string &error) {
  std::string mine = trace::takeChromeEvents(gJob.rank);
  std::vector<std::string> parts{mine};
  if (gJob.distributed) {
    if (!gatherStrings(mine, parts, error))
      return false;
    if (gJob.rank != 0)
      return true;
  }
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (size_t r = 0; r < parts.size(); ++r) {
    // Name each process after its rank.
    text += std::string(first ? "" : ",\n") +
            "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " +
            std::to_string(r) + ", \"args\": {\"name\": \"rank " +
            std::to_string(r) + "\"}}";
    first = false;
    if (!parts[r].empty())
      text += ",\n" + parts[r];
  }
  text += "\n]}\n";
  std::string_view view[] = {text};
  return detail::writeFileAtomically(a.trace, view, 1, error);
}

} // namespace

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stepKey(uint64_t seed, int64_t step) {
  return splitmix64(splitmix64(seed + 0x9E3779B97F4A7C15ull) +
                    static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull);
}

/// The evaluation program's entry (dort_set_eval_entry; null without one).
EntryFn gEvalEntry = nullptr;

EntryFn ps_entry() { return gServerEntry; }

Job gJob;

extern "C" void onTerminate(int) {
  if (gTerminatedLength)
    (void)!write(2, gTerminatedMessage, gTerminatedLength);
  _exit(143);
}

bool parseFault(Fault &f, std::string &error) {
  if (const char *env = std::getenv("DISTOPT_STRAGGLER"))
    if (*env && !ps::parseStragglers(env, f.stragglers, error))
      return false;
  const char *env = std::getenv("DISTOPT_FAULT");
  if (!env || !*env)
    return true;
  std::string v = env;
  size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  f.kind = v.substr(0, a);
  if ((f.kind != "die" && f.kind != "hang") || b == std::string::npos ||
      !parseInt(v.substr(a + 1, b - a - 1), f.rank, 0) ||
      !parseInt(v.substr(b + 1), f.step, 1)) {
    error = "DISTOPT_FAULT must be die:RANK:STEP or hang:RANK:STEP, got '" + v +
            "'";
    return false;
  }
  return true;
}

void injectFault(const Fault &f, int64_t rank, int64_t step,
                 const std::string &program) {
  if (f.rank != rank || f.step != step)
    return;
  std::fprintf(stderr, "%s: DISTOPT_FAULT: %s at step %lld\n", program.c_str(),
               f.kind == "die" ? "dying" : "hanging",
               static_cast<long long>(step));
  std::fflush(stderr);
  if (f.kind == "die")
    raise(SIGKILL);
  for (;;)
    pause();
}

void prepareTerminatedMessage(const std::string &program, int64_t step) {
  int n = std::snprintf(gTerminatedMessage, sizeof gTerminatedMessage,
                        "%s: terminated during step %lld (another rank "
                        "failed)\n",
                        program.c_str(), static_cast<long long>(step));
  gTerminatedLength =
      n > 0 ? std::min<size_t>(size_t(n), sizeof gTerminatedMessage - 1) : 0;
}

int fail(const TrainArgs &a, const std::string &msg) {
  if (gJob.distributed)
    dort_comm_abort(1, (a.program + ": error: " + msg).c_str());
  std::fprintf(stderr, "%s: error: %s\n", a.program.c_str(), msg.c_str());
  return 1;
}

bool stepsToRun(const TrainArgs &a, int64_t samples, int64_t batch,
                int64_t &steps, std::string &error) {
  int64_t perEpoch = samples / batch;
  if (perEpoch < 1) {
    error = "the data hold " + std::to_string(samples) +
            " samples, fewer than one batch of " + std::to_string(batch);
    return false;
  }
  steps = a.steps > 0 ? a.steps : a.epochs * perEpoch;
  return true;
}

bool addOptimizerInput(size_t i, const std::string &name,
                       const std::map<std::string, size_t> &outputIndex,
                       std::vector<std::pair<size_t, size_t>> &stateIO,
                       std::vector<std::pair<size_t, std::string>> &hyper,
                       std::string &error) {
  if (name.find(':') == std::string::npos) {
    hyper.emplace_back(i, name.substr(4));
    return true;
  }
  auto o = outputIndex.find(name);
  if (o == outputIndex.end()) {
    error = "optimizer state '" + name + "' has no update output";
    return false;
  }
  stateIO.emplace_back(i, o->second);
  return true;
}

std::optional<int> openBundle(int argc, char **argv, bool evalMode,
                              const std::string &defaultBundle, TrainArgs &a,
                              std::string &bundleDir, Manifest &m) {
  a.program = baseNameOf(argv[0]);
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help") {
      printTrainUsage(stdout, a.program, evalMode);
      return 0;
    }
  std::string error;
  if (!parseTrainArgs(argc, argv, a, error, evalMode)) {
    std::fprintf(stderr, "%s: error: %s\n", a.program.c_str(), error.c_str());
    return 2;
  }
  bundleDir = a.bundleDir.empty() ? defaultBundle : a.bundleDir;
  if (!loadManifest(detail::joinPath(bundleDir, "manifest.json"), m, error))
    return fail(a, error);
  return std::nullopt;
}

bool loadWeights(const Manifest &m, const std::string &bundleDir,
                 WeightStore &store, std::vector<Tensor> &weights,
                 std::string &error) {
  return store.load(m, bundleDir, error) &&
         loadWeightBlocks(m, store, weights, error);
}

double scheduledLr(const TrainArgs &a, int64_t step, int64_t total) {
  double base = a.hyper.at("lr");
  if (step < a.warmup)
    return base * double(step) / double(std::max<int64_t>(1, a.warmup));
  if (a.schedule == "constant")
    return base;
  double progress = double(step - a.warmup) /
                    double(std::max<int64_t>(1, total - a.warmup));
  if (a.schedule == "linear")
    return base * std::max(0.0, 1.0 - progress);
  return base * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

bool pathExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void removeFlatDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink(detail::joinPath(dir, name).c_str());
    }
    ::closedir(d);
    ::rmdir(dir.c_str());
  }
}

std::string numberText(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

} // namespace distopt::runtime::train

namespace distopt::runtime {

using namespace train;

int runTraining(int argc, char **argv, const std::vector<EntryFn> &entries,
                const std::string &defaultBundle) {
  TrainArgs a;
  std::string bundleDir, error;
  Manifest m;
  if (std::optional<int> status = openBundle(argc, argv, /*evalMode=*/false,
                                             defaultBundle, a, bundleDir, m))
    return *status;
  applyPrecision(m);
  if (m.parameterServers)
    return runParameterServers(a, m, bundleDir, entries[0]);
  if (a.asyncGiven)
    return fail(a, "--max-staleness, --drop-stale, --stale-lr, --sync-warmup "
                   "and --delay-compensation are cures for asynchronous "
                   "parameter servers: compile with --sync async");
  // A pipelined step: one program per stage, each with its own inputs,
  // weights and outputs (the manifest's lists are their union); its
  // activations travel inside the programs.
  bool pipelined = !m.stages.empty();
  for (const PipelineStage &st : m.stages)
    for (const auto *list : {&st.inputs, &st.outputs})
      for (const StageBuffer &b : *list)
        if (b.kind == StageBuffer::Kind::Activation)
          return fail(a, "this is a pipelined inference bundle: compile the "
                         "model with --loss and --optimizer to train it");
  if (entries.size() != std::max<size_t>(1, m.stages.size()))
    return fail(a, "the manifest has " + std::to_string(m.stages.size()) +
                       " pipeline stages, but the executable has " +
                       std::to_string(entries.size()) + " programs");
  // Accumulation is compiled into the step (its micro-batches run inside
  // one call): --accumulate may only restate it.
  int64_t compiled = m.accumulate.value_or(1);
  if (a.accumulate > 0 && a.accumulate != compiled)
    return fail(a, "--accumulate " + std::to_string(a.accumulate) +
                       ": this step was compiled for " +
                       std::to_string(compiled) +
                       " micro-batch(es) per update; accumulation is compiled "
                       "in (distopt compile ... --accumulate " +
                       std::to_string(a.accumulate) + ")");
  // Ranks: a data-parallel step runs under mpirun with exactly its rank
  // count; each rank trains on its share of every batch.
  std::vector<int64_t> coords;
  if (!joinJob(m, a, coords, error))
    return fail(a, error);
  if (gJob.distributed) {
    // The ranks' clocks start together (one node: one monotonic clock).
    if (dort_barrier(dort_comm_world()) != 0)
      return fail(a, dort_last_error_message());
  }
  trace::resetOrigin();
  trace::setEnabled(!a.trace.empty());
  Fault fault;
  if (!parseFault(fault, error))
    return fail(a, error);
  if (gJob.distributed)
    signal(SIGTERM, onTerminate);
  bool leader = gJob.rank == 0;
  // Roles of the inputs and outputs.
  std::map<std::string, size_t> inputIndex, outputIndex;
  for (size_t i = 0; i < m.inputs.size(); ++i)
    inputIndex[m.inputs[i].name] = i;
  for (size_t i = 0; i < m.outputs.size(); ++i)
    outputIndex[m.outputs[i].name] = i;
  if (!outputIndex.count("loss") || !outputIndex.count("grad_norm"))
    return fail(a, "this bundle is not a training step (compile it with "
                   "--loss KIND:OUTPUT --optimizer sgd|adam|adamw)");
  // fp16: dynamic loss scaling (the step returns found_inf).
  bool scaling = outputIndex.count("found_inf") > 0;
  if (!scaling && (a.initScaleGiven || a.growthIntervalGiven))
    return fail(a, "--init-scale and --growth-interval apply to a step "
                   "compiled with --precision fp16 (dynamic loss scaling)");
  // What this rank's program takes and returns: every input, weight and
  // output, or its pipeline stage's (in the order of its buffers).
  EntryFn entry = entries[pipelined ? coords[0] : 0];
  std::vector<int64_t> inputSlot(m.inputs.size(), -1),
      weightSlot(m.weights.size(), -1), outputSlot(m.outputs.size(), -1);
  // Weights no stage takes (only the evaluation program's, if any): every
  // rank loads them; they do not train.
  std::vector<bool> unstaged;
  std::vector<int64_t> weightStage = weightStages(m, &unstaged);
  if (pipelined) {
    const PipelineStage &st = m.stages[coords[0]];
    int64_t slot = 0;
    for (const StageBuffer &b : st.inputs)
      inputSlot[b.index] = slot++;
    for (int64_t w : st.weights)
      weightSlot[w] = slot++;
    for (const StageBuffer &b : st.outputs)
      outputSlot[b.index] = slot++;
  } else {
    int64_t slot = 0;
    for (int64_t &x : inputSlot)
      x = slot++;
    for (int64_t &x : weightSlot)
      x = slot++;
    for (size_t o = 0; o < m.outputs.size(); ++o)
      if (m.outputs[o].inPlace.empty())
        outputSlot[o] = slot++;
  }
  auto mineIn = [&](size_t i) { return inputSlot[i] >= 0; };
  auto mineOut = [&](size_t o) { return outputSlot[o] >= 0; };
  auto mineW = [&](size_t w) { return weightSlot[w] >= 0; };
  auto inPlace = [&](size_t o) { return !m.outputs[o].inPlace.empty(); };
  // Rank 0 has the whole of weight w only by gathering it (a collective):
  // a tensor-parallel block, or another pipeline stage's.
  auto wholeElsewhere = [&](size_t w) {
    return !m.weights[w].splitAxes.empty() || (pipelined && weightStage[w] != 0);
  };
  std::vector<size_t> dataInputs, keyInputs;
  std::vector<std::pair<size_t, size_t>> stateIO; // input, output
  std::vector<std::pair<size_t, std::string>> hyperInputs;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const std::string &n = m.inputs[i].name;
    if (n == "rng.key") {
      keyInputs.push_back(i);
    } else if (n.rfind("opt.", 0) != 0) {
      dataInputs.push_back(i);
    } else if (!addOptimizerInput(i, n, outputIndex, stateIO, hyperInputs,
                                  error)) {
      return fail(a, error);
    }
  }
  for (auto &[i, o] : stateIO)
    if (inPlace(o) && m.outputs[o].inPlace != m.inputs[i].name)
      return fail(a, "optimizer state '" + m.inputs[i].name +
                         "': its update is written in place of '" +
                         m.outputs[o].inPlace + "'");
  std::vector<std::pair<size_t, size_t>> weightUpdates; // output, weight
  for (size_t w = 0; w < m.weights.size(); ++w) {
    auto o = outputIndex.find("update:" + m.weights[w].name);
    if (o == outputIndex.end())
      continue;
    if (inPlace(o->second) && m.outputs[o->second].inPlace != m.weights[w].name)
      return fail(a, "weight '" + m.weights[w].name +
                         "': its update is "
                         "written in place of '" +
                         m.outputs[o->second].inPlace + "'");
    if (inPlace(o->second) ? mineW(w) : mineOut(o->second))
      weightUpdates.emplace_back(o->second, w);
  }
  // Only this rank's inputs are filled.
  auto keepMine = [&](std::vector<size_t> &list) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](size_t i) { return !mineIn(i); }),
               list.end());
  };
  keepMine(keyInputs);
  stateIO.erase(std::remove_if(stateIO.begin(), stateIO.end(),
                               [&](const auto &io) { return !mineIn(io.first); }),
                stateIO.end());
  hyperInputs.erase(std::remove_if(hyperInputs.begin(), hyperInputs.end(),
                                   [&](const auto &h) { return !mineIn(h.first); }),
                    hyperInputs.end());

  // Data: one file per data input, the same number of samples each.
  DataSet dataSet;
  if (!dataSet.open(m.inputs, dataInputs, a.data, "the step's", error))
    return fail(a, error);
  int64_t samples = dataSet.samples, batch = dataSet.batch;
  if (dataInputs.empty())
    return fail(a, "the step has no data inputs");
  std::unique_ptr<Evaluator> evaluator;
  if (!a.evalData.empty()) {
    if (!m.eval || !gEvalEntry)
      return fail(a, "--eval-data: this bundle has no evaluation program "
                     "(a step compiled with --loss and --optimizer has one, "
                     "unless distopt compile said its whole model exceeds a "
                     "device)");
    evaluator = std::make_unique<Evaluator>(m, *m.eval);
    if (!evaluator->open(a.evalData, error))
      return fail(a, "--eval-data: " + error);
  }
  int64_t steps = 0;
  if (!stepsToRun(a, samples, batch, steps, error))
    return fail(a, error);
  int64_t perEpoch = samples / batch;

  // Buffers: step inputs, weights (copies that the updates overwrite),
  // outputs.
  keepMine(dataInputs);
  std::vector<Tensor> inputs(m.inputs.size()), wholeBatch(m.inputs.size());
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (mineIn(i) &&
        !Tensor::create(m.inputs[i].dtype, m.inputs[i].shape, inputs[i], error))
      return fail(a, "input '" + m.inputs[i].name + "': " + error);
  for (size_t i : dataInputs)
    if (!m.inputs[i].splitAxes.empty() &&
        !Tensor::create(m.inputs[i].dtype, m.inputs[i].fileShape(),
                        wholeBatch[i], error))
      return fail(a, "input '" + m.inputs[i].name + "': " + error);
  WeightStore store;
  if (!store.load(m, bundleDir, error))
    return fail(a, error);
  std::vector<Tensor> weights;
  std::vector<bool> usedWeights(m.weights.size());
  for (size_t w = 0; w < m.weights.size(); ++w)
    usedWeights[w] = mineW(w) || unstaged[w];
  if (!loadWeightBlocks(m, store, weights, error, &usedWeights))
    return fail(a, error);
  std::vector<Tensor> outputs(m.outputs.size());
  for (size_t i = 0; i < m.outputs.size(); ++i)
    if (mineOut(i) &&
        !Tensor::create(m.outputs[i].dtype, m.outputs[i].shape, outputs[i], error))
      return fail(a, "output '" + m.outputs[i].name + "': " + error);
  int64_t slots = 0;
  for (auto *list : {&inputSlot, &weightSlot, &outputSlot})
    for (int64_t x : *list)
      slots += x >= 0;
  std::vector<void *> buffers(slots);
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (mineIn(i))
      buffers[inputSlot[i]] = inputs[i].data();
  for (size_t w = 0; w < m.weights.size(); ++w)
    if (mineW(w))
      buffers[weightSlot[w]] = weights[w].data();
  for (size_t o = 0; o < m.outputs.size(); ++o)
    if (mineOut(o))
      buffers[outputSlot[o]] = outputs[o].data();

  std::ofstream log;
  if (!a.log.empty() && leader) {
    log.open(a.log, std::ios::trunc);
    if (!log)
      return fail(a, "cannot write the log '" + a.log + "'");
  }
  dort_set_num_threads(0);
  std::vector<Named> namedWeights, namedState;
  for (auto &[o, w] : weightUpdates)
    namedWeights.push_back(namedWeight(m, w, weights[w]));
  for (auto &[i, o] : stateIO) {
    // The state of weight <w> ("opt.<kind>:<w>") is cut as the weight is
    // (a tensor-parallel block), and a ZeRO-1 chunk of that: this rank's
    // replica index on the data axis says which.
    Named state{m.inputs[i].name, &inputs[i], {}, 0};
    std::string weight = state.name.substr(state.name.find(':') + 1);
    auto w = std::find_if(m.weights.begin(), m.weights.end(),
                          [&](const WeightSpec &s) { return s.name == weight; });
    if (w != m.weights.end() && !w->splitAxes.empty())
      state.split = &*w;
    if (!m.inputs[i].splitAxes.empty()) {
      if (w == m.weights.end() || m.grid.size() < 2)
        return fail(a, "optimizer state '" + state.name +
                           "' is split, but not as a chunk of a weight");
      state.wholeShape = w->shape;
      state.offset = coords[1] * inputs[i].numElements();
    }
    namedState.push_back(state);
  }
  // GradScaler's state (fp16): the scale, good steps in a row, optimizer
  // steps taken; checkpointed with the optimizer state.
  Tensor scalerState;
  double *scaler = nullptr;
  if (scaling) {
    if (!Tensor::create(DType::Float64, {3}, scalerState, error))
      return fail(a, error);
    scaler = static_cast<double *>(scalerState.data());
    scaler[0] = a.initScale;
    scaler[1] = scaler[2] = 0;
    namedState.push_back(Named{"amp.scaler", &scalerState, {}, 0});
  }
  int64_t first = 0;
  if (!a.resume.empty()) {
    if (!readCheckpoint(a.resume, first, namedWeights, namedState, error))
      return fail(a, "--resume: " + error);
    if (first >= steps)
      return fail(a, "--resume: the checkpoint is at step " +
                         std::to_string(first) + ", the run has " +
                         std::to_string(steps) + " steps");
  }
  // On a GPU the updated weights and optimizer state stay on the device
  // from step to step (dort_device_carry; nothing in a CPU bundle): the
  // host buffers are brought up to date (deviceSync) before anything here
  // reads them. An update written in place is carried in its own slot.
  {
    std::vector<int64_t> carriedIn, carriedOut;
    for (auto &[o, w] : weightUpdates) {
      carriedIn.push_back(weightSlot[w]);
      carriedOut.push_back(inPlace(o) ? weightSlot[w] : outputSlot[o]);
    }
    for (auto &[i, o] : stateIO) {
      carriedIn.push_back(inputSlot[i]);
      carriedOut.push_back(inPlace(o) ? inputSlot[i] : outputSlot[o]);
    }
    dort_device_carry(buffers.data(), static_cast<int32_t>(carriedIn.size()),
                      carriedIn.data(), carriedOut.data());
  }
  auto deviceSync = [&](const char *what) {
    if (dort_device_sync(buffers.data()) == 0)
      return true;
    error = std::string(what) + ": " + dort_last_error_message();
    return false;
  };
  std::vector<int64_t> order(samples);
  std::iota(order.begin(), order.end(), 0);
  auto start = std::chrono::steady_clock::now();
  const Tensor &lossT = outputs[outputIndex["loss"]];
  const Tensor &normT = outputs[outputIndex["grad_norm"]];
  double lastLoss = 0;
  int64_t lastCheckpoint = 0; // written by this run
  for (int64_t step = first; step < steps; ++step) {
    int64_t epoch = step / perEpoch, within = step % perEpoch;
    if ((within == 0 || step == first) && a.shuffle) {
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 rng(a.seed * 1000003u + static_cast<uint64_t>(epoch));
      std::shuffle(order.begin(), order.end(), rng);
    }
    // The step's batch (the same samples on every rank: the order depends
    // on the seed alone), then this rank's share of it.
    std::vector<int64_t> rows(order.begin() + within * batch,
                              order.begin() + (within + 1) * batch);
    for (size_t i : dataInputs)
      dataSet.fill(i, m.inputs[i], rows, wholeBatch[i], inputs[i], m.grid,
                   coords);
    // The step's random key (training-mode dropout masks).
    for (size_t i : keyInputs)
      *static_cast<int64_t *>(inputs[i].data()) =
          static_cast<int64_t>(stepKey(a.seed, step + 1));
    double lr = scheduledLr(a, step, steps);
    for (auto &[i, name] : hyperInputs) {
      // A skipped step (fp16) does not count in Adam's bias correction.
      double v = name == "step"         ? (scaler ? scaler[2] : step) + 1.0
                 : name == "lr"         ? lr
                 : name == "loss_scale" ? (scaler ? scaler[0] : 1.0)
                                        : 0.0;
      if (name != "step" && name != "lr" && name != "loss_scale") {
        auto h = a.hyper.find(name);
        if (h == a.hyper.end())
          return fail(a, "the step takes a hyperparameter '" + name +
                             "' this runtime does not know");
        v = h->second;
      }
      *static_cast<float *>(inputs[i].data()) = static_cast<float>(v);
    }
    std::string context = "step " + std::to_string(step + 1);
    dort_set_context(context.c_str());
    if (gJob.distributed)
      prepareTerminatedMessage(a.program, step + 1);
    injectFault(fault, gJob.rank, step + 1, a.program);
    // A straggler (DISTOPT_STRAGGLER) is late for the step's collectives.
    sleepSeconds(stragglerDelay(fault.stragglers, gJob.rank, step + 1));
    dort_clear_error();
    dort_clear_pending_error();
    double stepStart = trace::now(), waitBefore = trace::commWaitSeconds();
    int32_t rc = entry(buffers.data());
    // A pipeline's sends still in flight complete before the next step.
    if (pipelined && rc == 0)
      dort_p2p_flush();
    double stepEnd = trace::now();
    double stepSeconds = stepEnd - stepStart;
    double commWait = trace::commWaitSeconds() - waitBefore;
    trace::record({"step " + std::to_string(step + 1), "step", stepStart,
                   stepEnd, 0, ""});
    std::string failure = entryFailure(rc);
    if (!failure.empty())
      return fail(a, "step " + std::to_string(step + 1) + " failed: " + failure);
    double loss = *static_cast<const float *>(lossT.data());
    double norm = *static_cast<const float *>(normT.data());
    if (!std::isfinite(loss))
      return fail(a, "the loss is " + numberText(loss) + " at step " +
                         std::to_string(step + 1) + " (last finite loss " +
                         numberText(lastLoss) + "); stopped" +
                         (lastCheckpoint > 0
                              ? "; the last good checkpoint is step " +
                                    std::to_string(lastCheckpoint) + " in '" +
                                    a.checkpointDir + "' (--resume it)"
                              : std::string()));
    lastLoss = loss;
    // GradScaler's update: back off and skip on a non-finite gradient
    // (the program kept weights and state), grow after a run of good steps.
    double usedScale = scaler ? scaler[0] : 1.0;
    bool skipped = false;
    if (scaler) {
      skipped = *static_cast<const float *>(
                    outputs[outputIndex["found_inf"]].data()) != 0.0f;
      if (skipped) {
        scaler[0] *= 0.5;
        scaler[1] = 0;
      } else {
        scaler[2] += 1;
        if (++scaler[1] >= double(a.growthInterval)) {
          scaler[0] *= 2.0;
          scaler[1] = 0;
        }
      }
    }
    // The updates become the next step's weights and state by swapping
    // buffers (the entry overwrites its outputs whole on every step), where
    // the program did not write them in place.
    for (auto &[o, w] : weightUpdates) {
      if (inPlace(o))
        continue;
      std::swap(weights[w], outputs[o]);
      buffers[weightSlot[w]] = weights[w].data();
      buffers[outputSlot[o]] = outputs[o].data();
    }
    for (auto &[i, o] : stateIO) {
      if (inPlace(o))
        continue;
      std::swap(inputs[i], outputs[o]);
      buffers[inputSlot[i]] = inputs[i].data();
      buffers[outputSlot[o]] = outputs[o].data();
    }
    double elapsed = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    double rate =
        elapsed > 0 ? double((step + 1 - first) * batch) / elapsed : 0.0;
    // Evaluation with the updated weights, every --eval-every steps and
    // after the last.
    std::string evalFields;
    if (evaluator && ((a.evalEvery > 0 && (step + 1) % a.evalEvery == 0) ||
                      step + 1 == steps)) {
      double evalLoss = 0, accuracy = -1;
      if (!deviceSync("evaluation"))
        return fail(a, error);
      if (pipelined) {
        // The whole model's program: every rank evaluates a share of the
        // batches with every weight, whole.
        std::vector<Tensor> whole;
        if (!wholeWeightsEverywhere(m, weights, weightStage, wholeElsewhere,
                                    whole, error))
          return fail(a, "evaluation: " + error);
        dort_device_host_changed(); // the evaluation's weights are new
        bool ok = evaluator->runShared(gEvalEntry, whole, evalLoss, accuracy,
                                       error);
        whole.clear();
        dort_device_host_changed();
        if (!ok)
          return fail(a, error);
      } else if (!evaluator->run(gEvalEntry, weights, coords, evalLoss,
                                 accuracy, error)) {
        return fail(a, error);
      }
      evalFields = ", \"eval_loss\": " + jsonNumber(evalLoss);
      if (accuracy >= 0)
        evalFields += ", \"eval_accuracy\": " + jsonNumber(accuracy);
      if (leader)
        std::fprintf(stderr, "%s: step %lld: eval loss %.6g%s\n",
                     a.program.c_str(), static_cast<long long>(step + 1),
                     evalLoss,
                     accuracy >= 0
                         ? (", accuracy " + std::to_string(accuracy)).c_str()
                         : "");
    }
    if (log)
      log << "{\"step\": " << step + 1 << ", \"loss\": " << jsonNumber(loss)
          << ", \"lr\": " << jsonNumber(lr)
          << ", \"grad_norm\": " << jsonNumber(norm)
          << (scaler ? ", \"loss_scale\": " + jsonNumber(usedScale) +
                           ", \"skipped\": " + (skipped ? "1" : "0")
                     : std::string())
          << ", \"samples_per_s\": " << jsonNumber(rate)
          << ", \"step_s\": " << jsonNumber(stepSeconds)
          << ", \"flops_per_s\": "
          << jsonNumber(stepSeconds > 0 ? m.stepFlops * double(m.ranks) /
                                              stepSeconds
                                        : 0.0)
          << ", \"comm_wait_s\": " << jsonNumber(commWait)
          << ", \"comm_share\": "
          << jsonNumber(stepSeconds > 0 ? commWait / stepSeconds : 0.0)
          << ", \"elapsed_s\": " << jsonNumber(elapsed) << evalFields
          << "}\n";
    if (!a.checkpointDir.empty() &&
        ((a.checkpointEvery > 0 && (step + 1) % a.checkpointEvery == 0) ||
         step + 1 == steps)) {
      if (!deviceSync("the weights on the GPU") ||
          (leader && !detail::makeDirectories(a.checkpointDir, error)) ||
          !writeCheckpoint(a.checkpointDir, step + 1, a, namedWeights,
                           namedState, error))
        return fail(a, "checkpoint at step " + std::to_string(step + 1) + ": " +
                           error);
      lastCheckpoint = step + 1;
    }
    if (leader && (step + 1 == steps ||
                   (step + 1) % std::max<int64_t>(1, steps / 10) == 0)) {
      // Time left at this run's average step so far.
      double eta = elapsed / double(step + 1 - first) * double(steps - step - 1);
      std::fprintf(stderr,
                   "%s: step %lld/%lld loss %.6g (%.0f samples/s, ETA %.0f s)\n",
                   a.program.c_str(), static_cast<long long>(step + 1),
                   static_cast<long long>(steps), loss, rate, eta);
    }
  }
  if (log) {
    log.close();
    if (!log)
      return fail(a, "writing the log '" + a.log + "' failed");
  }
  // Rank 0 writes the weights: the replicated ones as they are, the
  // tensor-parallel ones gathered from their blocks.
  std::vector<Tensor> gathered(m.weights.size());
  if (!deviceSync("the weights on the GPU"))
    return fail(a, error);
  if (!a.saveOnnx.empty() || !a.saveWeights.empty())
    for (size_t w = 0; w < m.weights.size(); ++w)
      if (wholeElsewhere(w) && !gatherWeight(m.weights[w], weightStage[w], weights[w],
                                      gathered[w], error))
        return fail(a, "gathering weight '" + m.weights[w].name + "': " + error);
  auto wholeOf = [&](size_t w) -> const Tensor & {
    return wholeElsewhere(w) ? gathered[w] : weights[w];
  };
  if (leader)
    if (int rc = saveTrainedWeights(a, m, wholeOf))
      return rc;
  if (!a.trace.empty() && !writeTrace(a, error))
    return fail(a, "--trace: " + error);
  if (gJob.distributed) {
    dort_grid_finalize();
    dort_comm_finalize();
  }
  return 0;
}

int runEvaluation(int argc, char **argv, const std::string &defaultBundle) {
  TrainArgs a;
  std::string bundleDir, error;
  Manifest m;
  if (std::optional<int> status = openBundle(argc, argv, /*evalMode=*/true,
                                             defaultBundle, a, bundleDir, m))
    return *status;
  if (!m.eval || !gEvalEntry)
    return fail(a, "this bundle has no evaluation program (a step compiled "
                   "with --loss and --optimizer has one, unless distopt "
                   "compile said its whole model exceeds a device)");
  std::vector<int64_t> coords;
  if (!joinJob(m, a, coords, error))
    return fail(a, error);
  // The bundle's weights, or a checkpoint's.
  WeightStore store;
  std::vector<Tensor> weights;
  if (!loadWeights(m, bundleDir, store, weights, error))
    return fail(a, error);
  std::vector<Named> named;
  for (size_t w = 0; w < m.weights.size(); ++w)
    named.push_back(namedWeight(m, w, weights[w]));
  if (!a.checkpoint.empty()) {
    int64_t step;
    if (!readCheckpoint(a.checkpoint, step, named, {}, error))
      return fail(a, "--checkpoint: " + error);
  }
  Evaluator evaluator(m, *m.eval);
  if (!evaluator.open(a.data, error))
    return fail(a, error);
  dort_set_num_threads(0);
  double loss = 0, accuracy = -1;
  if (!m.stages.empty()) {
    // A pipelined step's evaluation program is the whole model: every rank
    // runs a share of the batches with the weights put together from the
    // stages' blocks (each rank loaded every weight's block).
    std::vector<Tensor> whole;
    if (!wholeWeightsEverywhere(
            m, weights, weightStages(m),
            [&](size_t w) { return !m.weights[w].splitAxes.empty(); }, whole,
            error) ||
        !evaluator.runShared(gEvalEntry, whole, loss, accuracy, error))
      return fail(a, error);
  } else if (!evaluator.run(gEvalEntry, weights, coords, loss, accuracy,
                            error)) {
    return fail(a, error);
  }
  if (gJob.rank == 0) {
    std::printf("{\"loss\": %s, %s\"samples\": %lld}\n", jsonNumber(loss).c_str(),
                accuracy >= 0
                    ? ("\"accuracy\": " + jsonNumber(accuracy) + ", ").c_str()
                    : "",
                static_cast<long long>(evaluator.data.samples));
    std::fflush(stdout);
  }
  if (gJob.distributed) {
    dort_grid_finalize();
    dort_comm_finalize();
  }
  return 0;
}

} // namespace distopt::runtime

extern "C" void dort_set_eval_entry(dort_entry_fn entry) {
  distopt::runtime::gEvalEntry = entry;
}

extern "C" void dort_set_ps_entry(dort_entry_fn entry) {
  distopt::runtime::gServerEntry = entry;
}
