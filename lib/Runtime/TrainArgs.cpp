//===- TrainArgs.cpp - the arguments of `model train` ---------------------===//
//
// Parses and checks the command line of a training-step bundle's `train`
// mode (TrainArgs in TrainInternal.h).
//
//===----------------------------------------------------------------------===//

#include "TrainInternal.h"

namespace distopt::runtime::train {

namespace {

bool parseDouble(const std::string &s, double &out) {
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0' && std::isfinite(out);
}

/// NAME=FILE of --data and --eval-data.
bool parseNamedFile(const std::string &opt, const std::string &value,
                    std::vector<std::pair<std::string, std::string>> &out,
                    std::string &error) {
  auto e = value.find('=');
  if (e == std::string::npos || e == 0 || e + 1 == value.size()) {
    error = opt + " expects NAME=FILE, got '" + value + "'";
    return false;
  }
  out.emplace_back(value.substr(0, e), value.substr(e + 1));
  return true;
}

} // namespace

void printTrainUsage(std::FILE *out, const std::string &program,
                     bool evalMode) {
  const char *p = program.c_str();
  if (evalMode) {
    std::fprintf(
        out,
        "usage: %s eval --data NAME=FILE ... [--checkpoint DIR] [--bundle "
        "DIR]\n\n"
        "Runs the training step's evaluation program over a data set (the "
        "bundle's\nweights, or a checkpoint's) and prints {\"loss\", "
        "\"accuracy\", \"samples\"} as JSON.\n",
        p);
    return;
  }
  std::fprintf(
      out,
      "usage: %s train --data NAME=FILE ... (--steps N | --epochs E) "
      "[options]\n\n"
      "Trains the compiled step over data files (.npy or TensorProto .pb, "
      "samples\nalong axis 0, one --data per data input: the model's inputs "
      "and labels),\nfeeding the updated weights and optimizer state back "
      "after each step.\n\n"
      "options:\n"
      "  --data NAME=FILE          a data input's samples\n"
      "  --steps N, --epochs E     how long to train (an epoch: every whole "
      "batch once)\n"
      "  --lr F                    learning rate (default 1e-3)\n"
      "  --momentum F              SGD momentum (default 0)\n"
      "  --betas A,B               Adam's betas (default 0.9,0.999)\n"
      "  --eps F                   Adam's eps (default 1e-8)\n"
      "  --weight-decay F          weight decay (default 0)\n"
      "  --clip-grad-norm F        clip the global gradient norm to F "
      "(default: off)\n"
      "  --lr-schedule S           constant (default), cosine or linear "
      "decay to 0\n"
      "  --warmup-steps K          linear warm-up over K steps\n"
      "  --shuffle SEED            a seeded permutation per epoch (default "
      "seed 0)\n"
      "  --no-shuffle              the samples in file order\n"
      "  --accumulate K            must match the compile's --accumulate\n"
      "  --init-scale S            fp16: the first loss scale (default "
      "65536)\n"
      "  --growth-interval N       fp16: good steps before the scale "
      "doubles (default 2000)\n"
      "  --log FILE.jsonl          one JSON object a step (loss, lr, "
      "grad_norm, ...)\n"
      "  --trace FILE.json         a Chrome trace of every rank's steps\n"
      "  --checkpoint-dir DIR      write checkpoints there (at the end, and "
      "every\n"
      "                            --checkpoint-every K steps)\n"
      "  --resume DIR              continue from a checkpoint\n"
      "  --save-weights DIR        the trained weights, one .npy each\n"
      "  --save-onnx OUT.onnx      the ONNX model with the trained weights\n"
      "  --save-onnx-external-data its weights in OUT.data beside it\n"
      "  --eval-data NAME=FILE     evaluate on these data every "
      "--eval-every K steps\n"
      "                            and at the end\n"
      "  --bundle DIR              the bundle (default: this executable's "
      "directory)\n"
      "asynchronous parameter servers (compiled with --sync async):\n"
      "  --stale-lr                divide a gradient's rate by its "
      "staleness + 1\n"
      "  --drop-stale K            drop gradients more than K updates old\n"
      "  --max-staleness K         bound the staleness: workers wait\n"
      "  --sync-warmup K           the first K steps synchronous\n"
      "  --delay-compensation F    DC-ASGD's correction with strength F\n"
      "  --help                    print this help\n\n"
      "exit status: 0 success, 1 error, 2 usage error.\n",
      p);
}

bool parseInt(const std::string &s, int64_t &out, int64_t minimum) {
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  out = v;
  return !s.empty() && end && *end == '\0' && v >= minimum;
}

bool parseTrainArgs(int argc, char **argv, TrainArgs &a, std::string &error,
                    bool evalMode) {
  for (int i = 2; i < argc; ++i) {
    std::string opt = argv[i], value;
    if (evalMode && opt.rfind("--data", 0) != 0 &&
        opt.rfind("--checkpoint", 0) != 0 && opt.rfind("--bundle", 0) != 0) {
      error = "unknown option '" + opt + "' for eval (it takes --data "
              "NAME=FILE ..., --checkpoint DIR, --bundle DIR)";
      return false;
    }
    auto eq = opt.find('=');
    if (opt.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = opt.substr(eq + 1);
      opt = opt.substr(0, eq);
    } else if (opt != "--no-shuffle" && opt != "--save-onnx-external-data" &&
               opt != "--stale-lr") {
      if (i + 1 >= argc) {
        error = opt + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    double d;
    if (opt == "--data" || opt == "--eval-data") {
      if (!parseNamedFile(opt, value, opt == "--data" ? a.data : a.evalData,
                          error))
        return false;
    } else if (opt == "--steps") {
      if (!parseInt(value, a.steps)) {
        error = "--steps expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--epochs") {
      if (!parseInt(value, a.epochs)) {
        error = "--epochs expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--betas") {
      auto c = value.find(',');
      double b1, b2;
      if (c == std::string::npos || !parseDouble(value.substr(0, c), b1) ||
          !parseDouble(value.substr(c + 1), b2)) {
        error = "--betas expects A,B, got '" + value + "'";
        return false;
      }
      a.hyper["beta1"] = b1;
      a.hyper["beta2"] = b2;
    } else if (opt == "--lr" || opt == "--momentum" || opt == "--eps" ||
               opt == "--weight-decay" || opt == "--clip-grad-norm") {
      if (!parseDouble(value, d)) {
        error = opt + " expects a number, got '" + value + "'";
        return false;
      }
      std::string key = opt == "--weight-decay"     ? "weight_decay"
                        : opt == "--clip-grad-norm" ? "clip_norm"
                                                    : opt.substr(2);
      a.hyper[key] = d;
    } else if (opt == "--shuffle") {
      int64_t s;
      if (!parseInt(value, s, 0)) {
        error = "--shuffle expects a seed (a non-negative integer), got '" +
                value + "'";
        return false;
      }
      a.shuffle = true;
      a.seed = static_cast<uint64_t>(s);
    } else if (opt == "--lr-schedule") {
      if (value != "constant" && value != "cosine" && value != "linear") {
        error = "--lr-schedule expects constant, cosine or linear, got '" +
                value + "'";
        return false;
      }
      a.schedule = value;
    } else if (opt == "--warmup-steps") {
      if (!parseInt(value, a.warmup, 0)) {
        error = "--warmup-steps expects a non-negative integer, got '" +
                value + "'";
        return false;
      }
    } else if (opt == "--init-scale") {
      if (!parseDouble(value, a.initScale) || !(a.initScale > 0) ||
          !std::isfinite(a.initScale)) {
        error = "--init-scale expects a positive number, got '" + value + "'";
        return false;
      }
      a.initScaleGiven = true;
    } else if (opt == "--growth-interval") {
      if (!parseInt(value, a.growthInterval)) {
        error = "--growth-interval expects a positive integer, got '" + value +
                "'";
        return false;
      }
      a.growthIntervalGiven = true;
    } else if (opt == "--no-shuffle") {
      a.shuffle = false;
    } else if (opt == "--eval-every") {
      if (!parseInt(value, a.evalEvery)) {
        error = "--eval-every expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--accumulate") {
      if (!parseInt(value, a.accumulate)) {
        error = "--accumulate expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--log") {
      a.log = value;
    } else if (opt == "--trace") {
      a.trace = value;
    } else if (opt == "--save-weights") {
      a.saveWeights = value;
    } else if (opt == "--save-onnx") {
      a.saveOnnx = value;
    } else if (opt == "--save-onnx-external-data") {
      a.saveOnnxExternal = true;
    } else if (opt == "--checkpoint-dir") {
      a.checkpointDir = value;
    } else if (opt == "--checkpoint-every") {
      if (!parseInt(value, a.checkpointEvery)) {
        error = "--checkpoint-every expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--resume") {
      a.resume = value;
    } else if (opt == "--max-staleness" || opt == "--drop-stale" ||
               opt == "--sync-warmup") {
      int64_t n;
      if (!parseInt(value, n, 0)) {
        error = opt + " expects a non-negative integer, got '" + value + "'";
        return false;
      }
      (opt == "--max-staleness" ? a.async.maxStaleness
       : opt == "--drop-stale"  ? a.async.dropStale
                                : a.async.syncWarmup) = n;
      a.asyncGiven = true;
    } else if (opt == "--stale-lr") {
      a.async.staleLr = true;
      a.asyncGiven = true;
    } else if (opt == "--delay-compensation") {
      if (!parseDouble(value, d) || d < 0) {
        error = "--delay-compensation expects a number >= 0 (DC-ASGD's "
                "lambda), got '" + value + "'";
        return false;
      }
      a.async.delayCompensation = d;
      a.asyncGiven = true;
    } else if (opt == "--checkpoint" && evalMode) {
      a.checkpoint = value;
    } else if (opt == "--bundle") {
      a.bundleDir = value;
    } else {
      error = "unknown option '" + opt + "' for train";
      return false;
    }
  }
  if (evalMode) {
    if (a.data.empty()) {
      error = "eval needs --data NAME=FILE for its inputs";
      return false;
    }
    return true;
  }
  if (a.checkpointEvery > 0 && a.checkpointDir.empty()) {
    error = "--checkpoint-every needs --checkpoint-dir";
    return false;
  }
  if (a.saveOnnxExternal && a.saveOnnx.empty()) {
    error = "--save-onnx-external-data needs --save-onnx";
    return false;
  }
  if (a.evalEvery > 0 && a.evalData.empty()) {
    error = "--eval-every needs --eval-data";
    return false;
  }
  if ((a.steps > 0) == (a.epochs > 0)) {
    error = "train needs exactly one of --steps N and --epochs E";
    return false;
  }
  return true;
}

std::string baseNameOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

} // namespace distopt::runtime::train
