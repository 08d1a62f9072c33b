//===- Distributed.cpp - grid, blocks, and the shard collectives ----------===//

#include "distopt/Runtime/Distributed.h"

#include "CpuDevice.h"

#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"
#include "distopt/Runtime/Trace.h"

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace distopt::runtime {

int64_t launchedRanks() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *v = std::getenv(var)) {
      long long n = std::atoll(v);
      if (n > 0)
        return n;
    }
  return 1;
}

std::vector<int64_t> gridCoords(const std::vector<int64_t> &grid,
                                int64_t rank) {
  std::vector<int64_t> coords(grid.size());
  for (size_t i = grid.size(); i-- > 0;) {
    coords[i] = rank % grid[i];
    rank /= grid[i];
  }
  return coords;
}

namespace {

/// For each dimension, the global index of every local index.
std::vector<std::vector<int64_t>> indexMaps(const TensorSpec &spec,
                                            const std::vector<int64_t> &grid,
                                            const std::vector<int64_t> &coords) {
  const std::vector<int64_t> &global = spec.fileShape();
  std::vector<std::vector<int64_t>> maps(spec.shape.size());
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    int64_t parts = 1, index = 0;
    if (d < spec.splitAxes.size())
      for (int64_t a : spec.splitAxes[d]) {
        parts *= grid[a];
        index = index * grid[a] + coords[a];
      }
    int64_t local = spec.shape[d];
    maps[d].resize(local);
    int64_t k = parts > 1 ? spec.blockParts : 1;
    int64_t partSize = global[d] / k, perPart = local / k;
    for (int64_t j = 0; j < local; ++j) {
      int64_t part = perPart ? j / perPart : 0, off = perPart ? j % perPart : j;
      int64_t g = part * partSize + index * perPart + off;
      // An uneven split: the last blocks run past the end (padding).
      maps[d][j] = g < (part + 1) * partSize ? g : -1;
    }
  }
  return maps;
}

template <bool Extract>
void copyBlock(const char *src, char *dst, const TensorSpec &spec,
               const std::vector<int64_t> &grid,
               const std::vector<int64_t> &coords,
               const void *padValue = nullptr) {
  size_t elem = dtypeSize(spec.dtype);
  const std::vector<int64_t> &global = spec.fileShape();
  size_t rank = spec.shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  auto maps = indexMaps(spec, grid, coords);
  // Row-major strides (elements) of both tensors.
  std::vector<int64_t> gs(rank, 1), ls(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    gs[d] = gs[d + 1] * global[d + 1];
    ls[d] = ls[d + 1] * spec.shape[d + 1];
  }
  std::vector<int64_t> idx(rank, 0);
  int64_t total = 1;
  for (int64_t s : spec.shape)
    total *= s;
  if (total == 0)
    return;
  int64_t inner = spec.shape[rank - 1];
  for (int64_t done = 0; done < total; done += inner) {
    int64_t gbase = 0, lbase = 0;
    bool pad = false;
    for (size_t d = 0; d + 1 < rank; ++d) {
      pad |= maps[d][idx[d]] < 0;
      gbase += maps[d][idx[d]] * gs[d];
      lbase += idx[d] * ls[d];
    }
    // Copy the innermost row in contiguous runs; padding reads as zeros and
    // is never written back.
    const std::vector<int64_t> &m = maps[rank - 1];
    int64_t j = 0;
    while (j < inner) {
      if (pad || m[j] < 0) {
        int64_t run = 1;
        while (j + run < inner && (pad || m[j + run] < 0))
          ++run;
        if (Extract && !padValue)
          std::memset(dst + (lbase + j) * elem, 0, run * elem);
        else if (Extract)
          for (int64_t k = 0; k < run; ++k)
            std::memcpy(dst + (lbase + j + k) * elem, padValue, elem);
        j += run;
        continue;
      }
      int64_t run = 1;
      while (j + run < inner && m[j + run] == m[j] + run)
        ++run;
      const char *from;
      char *to;
      if (Extract) {
        from = src + (gbase + m[j]) * elem;
        to = dst + (lbase + j) * elem;
      } else {
        from = src + (lbase + j) * elem;
        to = dst + (gbase + m[j]) * elem;
      }
      std::memcpy(to, from, run * elem);
      j += run;
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < spec.shape[d])
        break;
      idx[d] = 0;
    }
  }
}

} // namespace

void extractBlock(const void *global, void *local, const TensorSpec &spec,
                  const std::vector<int64_t> &grid,
                  const std::vector<int64_t> &coords, const void *pad) {
  copyBlock<true>(static_cast<const char *>(global), static_cast<char *>(local),
                  spec, grid, coords, pad);
}

void insertBlock(const void *local, void *global, const TensorSpec &spec,
                 const std::vector<int64_t> &grid,
                 const std::vector<int64_t> &coords) {
  copyBlock<false>(static_cast<const char *>(local),
                   static_cast<char *>(global), spec, grid, coords);
}

} // namespace distopt::runtime

using namespace distopt::runtime;

namespace {

std::vector<int64_t> gGrid;
std::vector<dort_comm *> gAxisComms;
std::vector<int64_t> gCoords;

[[noreturn]] void die(const std::string &what) {
  dort_comm_abort(4, what.c_str());
  std::abort();
}

/// A strided memref as MLIR's C interface passes it: its sizes, and the
/// memref itself for copies through memrefCopy (MemRefCopy.cpp).
struct View {
  DortUnrankedMemRef *memref = nullptr;
  std::vector<int64_t> sizes;
  size_t elem = 0;

  int64_t count() const {
    int64_t n = 1;
    for (int64_t s : sizes)
      n *= s;
    return n;
  }
};

View viewOf(DortUnrankedMemRef *m, size_t elem) {
  View v;
  v.memref = m;
  v.elem = elem;
  // {allocated, aligned, offset, sizes[rank], strides[rank]}
  auto *words = static_cast<int64_t *>(m->descriptor);
  v.sizes.assign(words + 3, words + 3 + m->rank);
  return v;
}

/// Copies between a strided memref and a row-major buffer of its shape,
/// with the runtime's memrefCopy on a descriptor of the buffer.
void copyFlat(const View &v, char *flat, bool toFlat) {
  int64_t rank = static_cast<int64_t>(v.sizes.size());
  std::vector<int64_t> words(3 + 2 * rank);
  std::memcpy(&words[0], &flat, sizeof(flat)); // allocated
  std::memcpy(&words[1], &flat, sizeof(flat)); // aligned
  words[2] = 0;                                 // offset
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    words[3 + d] = v.sizes[d];
    words[3 + rank + d] = stride;
    stride *= v.sizes[d];
  }
  DortUnrankedMemRef buffer{rank, words.data()};
  auto elem = static_cast<int64_t>(v.elem);
  if (toFlat)
    memrefCopy(elem, v.memref, &buffer);
  else
    memrefCopy(elem, &buffer, v.memref);
}

std::vector<char> pack(const View &v) {
  std::vector<char> flat(v.count() * v.elem);
  copyFlat(v, flat.data(), true);
  return flat;
}
void unpack(const std::vector<char> &flat, const View &v) {
  copyFlat(v, const_cast<char *>(flat.data()), false);
}

/// outer x (rows along `dim`) x inner bytes of a row-major shape.
void splitShape(const std::vector<int64_t> &shape, int64_t dim, size_t elem,
                int64_t &outer, int64_t &rows, int64_t &inner) {
  outer = 1;
  inner = static_cast<int64_t>(elem);
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  rows = shape[dim];
}

/// Contiguous blocks [t][outer][rows/t][inner] of a tensor split along dim.
std::vector<char> toBlocks(const std::vector<char> &flat,
                           const std::vector<int64_t> &shape, int64_t dim,
                           int64_t t, size_t elem) {
  int64_t outer, rows, inner;
  splitShape(shape, dim, elem, outer, rows, inner);
  int64_t per = rows / t;
  std::vector<char> out(flat.size());
  char *o = out.data();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < outer; ++i) {
      std::memcpy(o, flat.data() + (i * rows + r * per) * inner, per * inner);
      o += per * inner;
    }
  return out;
}

/// The inverse: t blocks of `blockShape` joined along dim.
std::vector<char> fromBlocks(const std::vector<char> &blocks,
                             const std::vector<int64_t> &blockShape,
                             int64_t dim, int64_t t, size_t elem) {
  int64_t outer, per, inner;
  splitShape(blockShape, dim, elem, outer, per, inner);
  std::vector<char> out(blocks.size());
  const char *b = blocks.data();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < outer; ++i) {
      std::memcpy(out.data() + (i * per * t + r * per) * inner, b, per * inner);
      b += per * inner;
    }
  return out;
}

dort_comm *axisComm(int64_t axis, const char *what) {
  if (axis < 0 || axis >= static_cast<int64_t>(gAxisComms.size()) ||
      !gAxisComms[axis])
    die(std::string(what) + ": grid axis " + std::to_string(axis) +
        " has no communicator (dort_grid_init not called)");
  return gAxisComms[axis];
}

/// shard.ReductionKind: Sum=1, Max=2, Min=3, Product=4, Average=5.
dort_redop redop(int64_t kind, bool &average) {
  average = kind == 5;
  switch (kind) {
  case 2:
    return DORT_MAX;
  case 3:
    return DORT_MIN;
  case 4:
    return DORT_PROD;
  default:
    return DORT_SUM;
  }
}

void divideBy(std::vector<char> &flat, dort_dtype d, int64_t n) {
  if (d == DORT_F32) {
    auto *p = reinterpret_cast<float *>(flat.data());
    for (size_t i = 0; i < flat.size() / 4; ++i)
      p[i] /= static_cast<float>(n);
  } else if (d == DORT_F64) {
    auto *p = reinterpret_cast<double *>(flat.data());
    for (size_t i = 0; i < flat.size() / 8; ++i)
      p[i] /= static_cast<double>(n);
  } else {
    die("an average reduction of this element type is not supported");
  }
}

void check(int rc, const char *what) {
  if (rc != 0)
    die(std::string(what) + ": " + dort_last_error_message());
}

void allReduce(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
               int64_t kind, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View vi = viewOf(in, elem), vo = viewOf(out, elem);
  dort_comm *c = axisComm(axis, "all_reduce");
  std::vector<char> buf = pack(vi);
  bool average;
  dort_redop op = redop(kind, average);
  {
    trace::Collective timed("all_reduce", static_cast<int64_t>(buf.size()));
    check(dort_all_reduce(buf.data(), buf.data(), vi.count(), d, op, c,
                          nullptr),
          "all_reduce");
  }
  if (average)
    divideBy(buf, d, dort_comm_size(c));
  unpack(buf, vo);
}

/// Asynchronous all-reduces (data-parallel gradient buckets): started
/// where the bucket's last gradient is produced, waited for where the sum
/// is first read, so the backward pass in between overlaps the
/// communication, as in Horovod and PyTorch DDP. They run in start order
/// (program order: the same on every rank) on one communication thread,
/// over a second communicator per grid axis so they never interleave with
/// the main thread's collectives. Without MPI_THREAD_MULTIPLE, or with
/// DISTOPT_COMM_THREAD=0, each runs at its start instead.
class AsyncCollectives {
public:
  struct Job {
    std::vector<char> buf;
    /// A reduce-scatter's block of this rank (an all-reduce sums in `buf`).
    std::vector<char> result;
    bool scatter = false;
    /// The output memref's descriptor, copied (the caller's may not live
    /// until the wait).
    std::vector<int64_t> outWords;
    DortUnrankedMemRef out{0, nullptr};
    size_t elem = 0;
    int64_t count = 0, tag = -1;
    dort_dtype dtype = DORT_F32;
    dort_redop op = DORT_SUM;
    bool average = false;
    dort_comm *comm = nullptr;
    bool done = false;
    std::string error;
  };

  /// Set up by dort_grid_init: the second communicator of each axis.
  void init(std::vector<dort_comm *> comms) {
    comms_ = std::move(comms);
    const char *env = std::getenv("DISTOPT_COMM_THREAD");
    threaded_ = dort_comm_thread_multiple() &&
                !(env && std::string(env) == "0");
  }
  void finalize() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable())
      worker_.join();
    stop_ = false;
    jobs_.clear();
    for (dort_comm *c : comms_)
      dort_comm_free(c);
    comms_.clear();
  }

  /// An all-reduce, or with `scatterDim` >= 0 a reduce-scatter along it.
  int64_t start(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
                int64_t kind, dort_dtype d, int64_t tag,
                int64_t scatterDim = -1) {
    if (axis < 0 || axis >= static_cast<int64_t>(comms_.size()))
      die("all_reduce: no communicator for grid axis " + std::to_string(axis) +
          " (dort_grid_init not called)");
    auto job = std::make_unique<Job>();
    job->elem = dort_dtype_size(d);
    View vi = viewOf(in, job->elem);
    job->buf = pack(vi);
    job->count = vi.count();
    if (scatterDim >= 0) {
      int64_t t = dort_comm_size(comms_[axis]);
      job->scatter = true;
      job->buf = toBlocks(job->buf, vi.sizes, scatterDim, t, job->elem);
      job->result.resize(job->buf.size() / t);
      job->count /= t;
    }
    job->op = redop(kind, job->average);
    job->dtype = d;
    job->tag = tag;
    job->comm = comms_[axis];
    auto *words = static_cast<int64_t *>(out->descriptor);
    job->outWords.assign(words, words + 3 + 2 * out->rank);
    job->out = {out->rank, job->outWords.data()};
    Job *raw = job.get();
    int64_t handle = next_++;
    if (trace::enabled()) {
      double t = trace::now();
      trace::record({"start (bucket " + std::to_string(tag) + ")", "comm", t,
                     t, 0, "\"bucket\": " + std::to_string(tag), true});
    }
    std::unique_lock<std::mutex> lock(mutex_);
    jobs_[handle] = std::move(job);
    if (!threaded_) {
      lock.unlock();
      run(*raw, /*thread=*/0);
      return handle;
    }
    queue_.push_back(raw);
    if (!worker_.joinable())
      worker_ = std::thread([this] { loop(); });
    lock.unlock();
    cv_.notify_all();
    return handle;
  }

  void wait(int64_t handle) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto it = jobs_.find(handle);
      if (it == jobs_.end())
        die("wait: unknown collective handle " + std::to_string(handle));
      trace::Collective timed("wait", -1, it->second->tag, /*blocking=*/true);
      cv_.wait(lock, [&] { return it->second->done; });
      job = std::move(it->second);
      jobs_.erase(it);
    }
    if (!job->error.empty())
      die(job->error);
    unpack(job->scatter ? job->result : job->buf, viewOf(&job->out, job->elem));
  }

private:
  void run(Job &job, int thread) {
    std::string error;
    const char *name = job.scatter ? "reduce_scatter" : "all_reduce";
    {
      trace::Collective timed(name, static_cast<int64_t>(job.buf.size()),
                              job.tag, /*blocking=*/thread == 0, thread);
      int rc = job.scatter
                   ? dort_reduce_scatter(job.buf.data(), job.result.data(),
                                         job.count, job.dtype, job.op,
                                         job.comm, nullptr)
                   : dort_all_reduce(job.buf.data(), job.buf.data(), job.count,
                                     job.dtype, job.op, job.comm, nullptr);
      if (rc != 0)
        error = std::string(name) + ": " + dort_last_error_message();
    }
    if (error.empty() && job.average)
      divideBy(job.scatter ? job.result : job.buf, job.dtype,
               dort_comm_size(job.comm));
    std::lock_guard<std::mutex> lock(mutex_);
    job.error = error;
    job.done = true;
    cv_.notify_all();
  }
  void loop() {
    for (;;) {
      Job *job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty())
          return;
        job = queue_.front();
        queue_.pop_front();
      }
      run(*job, /*thread=*/1);
    }
  }

  std::vector<dort_comm *> comms_;
  bool threaded_ = false, stop_ = false;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job *> queue_;
  std::map<int64_t, std::unique_ptr<Job>> jobs_;
  int64_t next_ = 1;
  std::thread worker_;
};

AsyncCollectives &async() {
  static AsyncCollectives a;
  return a;
}

void allGather(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
               int64_t dim, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View vi = viewOf(in, elem), vo = viewOf(out, elem);
  dort_comm *c = axisComm(axis, "all_gather");
  int64_t t = dort_comm_size(c);
  std::vector<char> mine = pack(vi), all(mine.size() * t);
  {
    trace::Collective timed("all_gather", static_cast<int64_t>(all.size()));
    check(dort_all_gather(mine.data(), all.data(), vi.count(), d, c, nullptr),
          "all_gather");
  }
  unpack(fromBlocks(all, vi.sizes, dim, t, elem), vo);
}

void reduceScatter(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                   int64_t axis, int64_t kind, int64_t dim, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View vi = viewOf(in, elem), vo = viewOf(out, elem);
  dort_comm *c = axisComm(axis, "reduce_scatter");
  int64_t t = dort_comm_size(c);
  std::vector<char> blocks = toBlocks(pack(vi), vi.sizes, dim, t, elem);
  std::vector<char> mine(blocks.size() / t);
  bool average;
  dort_redop op = redop(kind, average);
  {
    trace::Collective timed("reduce_scatter",
                            static_cast<int64_t>(blocks.size()));
    check(dort_reduce_scatter(blocks.data(), mine.data(), vo.count(), d, op, c,
                              nullptr),
          "reduce_scatter");
  }
  if (average)
    divideBy(mine, d, t);
  unpack(mine, vo);
}

void allToAll(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
              int64_t splitDim, int64_t concatDim, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View vi = viewOf(in, elem), vo = viewOf(out, elem);
  dort_comm *c = axisComm(axis, "all_to_all");
  int64_t t = dort_comm_size(c);
  std::vector<char> send = toBlocks(pack(vi), vi.sizes, splitDim, t, elem);
  std::vector<char> recv(send.size());
  {
    trace::Collective timed("all_to_all", static_cast<int64_t>(send.size()));
    check(dort_all_to_all(send.data(), recv.data(), vi.count() / t, d, c,
                          nullptr),
          "all_to_all");
  }
  std::vector<int64_t> blockShape = vi.sizes;
  blockShape[splitDim] /= t;
  unpack(fromBlocks(recv, blockShape, concatDim, t, elem), vo);
}

void allSlice(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
              int64_t dim, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View vi = viewOf(in, elem), vo = viewOf(out, elem);
  if (axis < 0 || axis >= static_cast<int64_t>(gCoords.size()))
    die("all_slice: no grid (dort_grid_init not called)");
  int64_t t = gGrid[axis], me = gCoords[axis];
  std::vector<char> blocks = toBlocks(pack(vi), vi.sizes, dim, t, elem);
  size_t per = blocks.size() / t;
  std::vector<char> mine(blocks.begin() + me * per,
                         blocks.begin() + (me + 1) * per);
  unpack(mine, vo);
}

/// Pipeline point-to-point messages (shard.send / shard.recv between
/// neighbouring stages). A send copies its tensor and returns at once
/// (MPI_Isend on the copy): a stage never waits for its neighbour to post
/// the receive. Receives block. Sends still in flight are completed by the
/// next send or receive that finds them done, and all of them by
/// dort_p2p_flush (the train loop calls it after every step).
struct PendingSend {
  std::vector<char> data;
  dort_request *request = nullptr;
};
std::deque<PendingSend> &pendingSends() {
  static std::deque<PendingSend> sends;
  return sends;
}

void reapSends() {
  auto &sends = pendingSends();
  while (!sends.empty()) {
    int done = 0;
    check(dort_test(sends.front().request, &done), "send");
    if (!done)
      return;
    sends.pop_front();
  }
}

void sendTo(DortUnrankedMemRef *in, int64_t axis, int64_t peer, dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View v = viewOf(in, elem);
  dort_comm *c = axisComm(axis, "send");
  reapSends();
  PendingSend s;
  s.data = pack(v);
  trace::Collective timed("send", static_cast<int64_t>(s.data.size()));
  check(dort_isend(s.data.data(), v.count(), d, static_cast<int>(peer), c,
                   &s.request),
        "send");
  pendingSends().push_back(std::move(s));
}

void recvFrom(DortUnrankedMemRef *out, int64_t axis, int64_t peer,
              dort_dtype d) {
  size_t elem = dort_dtype_size(d);
  View v = viewOf(out, elem);
  dort_comm *c = axisComm(axis, "recv");
  reapSends();
  std::vector<char> flat(v.count() * elem);
  {
    trace::Collective timed("recv", static_cast<int64_t>(flat.size()));
    check(dort_recv(flat.data(), v.count(), d, static_cast<int>(peer), c,
                    nullptr),
          "recv");
  }
  unpack(flat, v);
}

} // namespace

extern "C" {

void dort_trace_pipeline(int64_t kind, int64_t microbatch) {
  // The open span of this rank's stage: a forward or a backward.
  static double start = 0;
  if (kind == 0 || kind == 2) {
    start = trace::now();
    return;
  }
  if (!trace::enabled())
    return;
  int64_t stage = gCoords.empty() ? 0 : gCoords[0];
  trace::record({std::string(kind == 1 ? "F" : "B") + std::to_string(microbatch),
                 kind == 1 ? "forward" : "backward", start, trace::now(), 0,
                 "\"stage\": " + std::to_string(stage) +
                     ", \"microbatch\": " + std::to_string(microbatch)});
}

void dort_p2p_flush(void) {
  auto &sends = pendingSends();
  while (!sends.empty()) {
    check(dort_wait(sends.front().request), "send");
    sends.pop_front();
  }
}

int dort_grid_init(int ndims, const int64_t *shape) {
  dort_comm *world = dort_comm_world();
  if (!world)
    return dort_set_error(1, "dort_grid_init: communication not initialised");
  return dort_grid_init_on(world, ndims, shape);
}

int dort_grid_init_on(dort_comm *world, int ndims, const int64_t *shape) {
  dort_grid_finalize();
  if (!world)
    return dort_set_error(1, "dort_grid_init: no communicator");
  gGrid.assign(shape, shape + ndims);
  gCoords = gridCoords(gGrid, dort_comm_rank(world));
  for (int a = 0; a < ndims; ++a) {
    dort_comm *c = nullptr;
    if (int rc = dort_comm_grid_axis(world, ndims, shape, a, &c))
      return rc;
    gAxisComms.push_back(c);
  }
  // The asynchronous collectives' own communicators (one more per axis).
  std::vector<dort_comm *> second;
  for (int a = 0; a < ndims; ++a) {
    dort_comm *c = nullptr;
    if (int rc = dort_comm_grid_axis(world, ndims, shape, a, &c))
      return rc;
    second.push_back(c);
  }
  async().init(std::move(second));
  return 0;
}

void dort_grid_finalize(void) {
  async().finalize();
  for (dort_comm *c : gAxisComms)
    dort_comm_free(c);
  gAxisComms.clear();
  gGrid.clear();
  gCoords.clear();
}

dort_comm *dort_grid_axis_comm(int axis) {
  return axis >= 0 && axis < static_cast<int>(gAxisComms.size())
             ? gAxisComms[axis]
             : nullptr;
}

int64_t dort_grid_coord(int axis) {
  return axis >= 0 && axis < static_cast<int>(gCoords.size()) ? gCoords[axis]
                                                              : -1;
}


} // extern "C"

// The CPU device's collectives (Device.h): MPI over the grid's axes.
using distopt::runtime::CpuDevice;

void CpuDevice::all_reduce(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                           int64_t axis, int64_t kind, dort_dtype dtype) {
  allReduce(in, out, axis, kind, dtype);
}
int64_t CpuDevice::start_all_reduce(DortUnrankedMemRef *in,
                                    DortUnrankedMemRef *out, int64_t axis,
                                    int64_t kind, int64_t tag,
                                    dort_dtype dtype) {
  return async().start(in, out, axis, kind, dtype, tag);
}
int64_t CpuDevice::start_reduce_scatter(DortUnrankedMemRef *in,
                                        DortUnrankedMemRef *out, int64_t axis,
                                        int64_t kind, int64_t dim, int64_t tag,
                                        dort_dtype dtype) {
  return async().start(in, out, axis, kind, dtype, tag, dim);
}
void CpuDevice::wait(int64_t handle) { async().wait(handle); }
void CpuDevice::all_gather(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                           int64_t axis, int64_t dim, dort_dtype dtype) {
  allGather(in, out, axis, dim, dtype);
}
void CpuDevice::reduce_scatter(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                               int64_t axis, int64_t kind, int64_t dim,
                               dort_dtype dtype) {
  reduceScatter(in, out, axis, kind, dim, dtype);
}
void CpuDevice::all_to_all(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                           int64_t axis, int64_t splitDim, int64_t concatDim,
                           dort_dtype dtype) {
  allToAll(in, out, axis, splitDim, concatDim, dtype);
}
void CpuDevice::all_slice(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                          int64_t axis, int64_t dim, dort_dtype dtype) {
  allSlice(in, out, axis, dim, dtype);
}
void CpuDevice::send(DortUnrankedMemRef *in, int64_t axis, int64_t peer,
                     dort_dtype dtype) {
  sendTo(in, axis, peer, dtype);
}
void CpuDevice::recv(DortUnrankedMemRef *out, int64_t axis, int64_t peer,
                     dort_dtype dtype) {
  recvFrom(out, axis, peer, dtype);
}
