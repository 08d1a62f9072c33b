//===- ServerPlacement.h - which parameter server holds what ----*- C++ -*-===//
//
// Under parameter servers (`--sync ps|async --servers K`) every trained
// weight, flattened, lives on the servers in pieces: server s holds the
// concatenation of its pieces, its "shard". The placement balances bytes:
//
//   - a weight larger than a quarter of one server's fair share
//     (total / K / 4) is split into K equal contiguous pieces, one per
//     server (as MXNet's KVStore splits big arrays), so no single large
//     tensor can unbalance the servers;
//   - the rest are placed whole, largest first, each on the server that
//     holds the fewest elements so far (TensorFlow's greedy load
//     balancing), ties to the lowest server.
//
// The compiler writes the pieces into the manifest (the runtime reads them
// there), the planner prices each server's link with the same loads. One
// place says it. Header-only and free of LLVM: the runtime includes it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RUNTIME_SERVERPLACEMENT_H
#define DISTOPT_RUNTIME_SERVERPLACEMENT_H

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace distopt::ps {

struct Piece {
  int64_t tensor = 0;      ///< index into the sizes placed
  int64_t offset = 0;      ///< first element of the flattened tensor
  int64_t length = 0;      ///< elements
  int64_t server = 0;
  int64_t shardOffset = 0; ///< where it starts in its server's shard
};

struct Placement {
  int64_t servers = 1;
  std::vector<Piece> pieces;    ///< by server, then by shard offset
  std::vector<int64_t> load;    ///< elements per server
  /// The longest shard: every server's update runs on this many elements
  /// (shorter shards are padded with zeros, which no optimizer moves).
  int64_t shardLength() const {
    return load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  }
};

/// The placement of tensors of `sizes` elements over `servers` servers.
inline Placement placeOnServers(const std::vector<int64_t> &sizes,
                                int64_t servers) {
  Placement p;
  p.servers = std::max<int64_t>(1, servers);
  p.load.assign(p.servers, 0);
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  int64_t share = (total + p.servers - 1) / p.servers;
  int64_t splitAbove = std::max<int64_t>(1, share / 4);
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sizes[a] > sizes[b]; });
  std::vector<Piece> pieces;
  for (int64_t t : order) {
    int64_t n = sizes[t];
    if (n <= 0)
      continue;
    if (p.servers > 1 && n > splitAbove) {
      int64_t chunk = (n + p.servers - 1) / p.servers;
      for (int64_t s = 0; s < p.servers && s * chunk < n; ++s) {
        int64_t len = std::min(chunk, n - s * chunk);
        pieces.push_back({t, s * chunk, len, s, p.load[s]});
        p.load[s] += len;
      }
      continue;
    }
    int64_t s = std::min_element(p.load.begin(), p.load.end()) - p.load.begin();
    pieces.push_back({t, 0, n, s, p.load[s]});
    p.load[s] += n;
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece &a, const Piece &b) {
                     return a.server != b.server ? a.server < b.server
                                                 : a.shardOffset < b.shardOffset;
                   });
  p.pieces = std::move(pieces);
  return p;
}

} // namespace distopt::ps

#endif // DISTOPT_RUNTIME_SERVERPLACEMENT_H
