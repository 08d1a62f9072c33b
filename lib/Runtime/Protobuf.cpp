//===- Protobuf.cpp - the protobuf wire format ----------------------------===//
//
// See Protobuf.h.
//
//===----------------------------------------------------------------------===//

#include "Protobuf.h"

namespace distopt::runtime::pb {

void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void putVarintField(std::string &out, uint64_t number, uint64_t v) {
  putVarint(out, (number << 3) | Varint);
  putVarint(out, v);
}

void putBytesField(std::string &out, uint64_t number,
                   std::string_view payload) {
  putVarint(out, (number << 3) | LengthDelimited);
  putVarint(out, payload.size());
  out.append(payload.data(), payload.size());
}

bool readVarint(const uint8_t *&p, const uint8_t *end, uint64_t &v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    uint8_t byte = *p++;
    v |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return true;
  }
  return false;
}

bool nextField(const uint8_t *&p, const uint8_t *end, Field &f) {
  f.begin = p;
  uint64_t key, len;
  if (!readVarint(p, end, key))
    return false;
  f.number = key >> 3;
  f.wire = key & 7;
  f.payload = nullptr;
  f.payloadSize = 0;
  switch (f.wire) {
  case Varint:
    if (!readVarint(p, end, len))
      return false;
    break;
  case Fixed64:
    if (end - p < 8)
      return false;
    p += 8;
    break;
  case LengthDelimited:
    if (!readVarint(p, end, len) || uint64_t(end - p) < len)
      return false;
    f.payload = p;
    f.payloadSize = len;
    p += len;
    break;
  case Fixed32:
    if (end - p < 4)
      return false;
    p += 4;
    break;
  default:
    return false;
  }
  f.end = p;
  return true;
}

} // namespace distopt::runtime::pb
