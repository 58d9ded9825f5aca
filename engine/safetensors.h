// Checkpoints in the safetensors format (the format PyTorch and Hugging Face read):
//   8 bytes little-endian u64 N | N bytes of JSON header | raw little-endian data
// The header maps each tensor name to {"dtype": "F32"|"F64"|"I32", "shape": [...],
// "data_offsets": [begin, end]} (offsets relative to the data section) and may hold a
// "__metadata__" object of string -> string.
//
// Files are written to "<path>.tmp" and renamed, so a crash never leaves a half-written
// checkpoint. Loading validates everything (header size, JSON, dtypes, shapes vs
// offsets, offsets within the file, overlaps) and throws std::runtime_error naming the
// file and the problem — a truncated or corrupted file never crashes the reader.
#pragma once

#include <map>
#include <string>

#include "engine/tensor.h"

namespace wedge {

struct SafeTensors {
  std::map<std::string, Tensor> tensors;  // always on the CPU after loading
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafeTensors load_safetensors(const std::string& path);

// Copies a loaded tensor into a destination (e.g. a parameter), checking name, dtype and
// shape with a clear error naming the file and the tensor.
void assign_checked(Tensor& dst, const Tensor& src, const std::string& name,
                    const std::string& file);

}  // namespace wedge
