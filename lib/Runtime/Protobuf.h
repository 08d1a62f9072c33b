//===- Protobuf.h - the protobuf wire format, as the runtime needs it -----===//
//
// One reader and writer of protobuf's wire format for the runtime's ONNX
// files: TensorProto (TensorProto.cpp) and the initializers of a trained
// model (Train.cpp's --save-onnx). Internal to lib/Runtime.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_RUNTIME_PROTOBUF_H
#define DISTOPT_LIB_RUNTIME_PROTOBUF_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace distopt::runtime::pb {

enum WireType { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

/// Appends `v` as a varint.
void putVarint(std::string &out, uint64_t v);
/// Appends field `number` holding the varint `v`.
void putVarintField(std::string &out, uint64_t number, uint64_t v);
/// Appends field `number` holding `payload` (length-delimited: bytes, a
/// string, or a message).
void putBytesField(std::string &out, uint64_t number, std::string_view payload);

/// Reads a varint at `p` (advanced past it); false when truncated or longer
/// than 10 bytes.
bool readVarint(const uint8_t *&p, const uint8_t *end, uint64_t &v);

/// One field of a message: its number, wire type, the whole field's bytes
/// and (length-delimited fields) its payload.
struct Field {
  uint64_t number = 0, wire = 0;
  const uint8_t *begin = nullptr, *end = nullptr;
  const uint8_t *payload = nullptr;
  size_t payloadSize = 0;
};
/// Reads the field at `p` (advanced past it); false when malformed.
bool nextField(const uint8_t *&p, const uint8_t *end, Field &f);

} // namespace distopt::runtime::pb

#endif // DISTOPT_LIB_RUNTIME_PROTOBUF_H
