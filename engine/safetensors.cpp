#include "engine/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/atomic_file.h"
#include "engine/text_escape.h"

namespace wedge {

namespace {

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::F32;
  else if (s == "F64") out = DType::F64;
  else if (s == "I32") out = DType::I32;
  else return false;
  return true;
}

// `what` may quote the file (tensor names, the JSON parser's view of the header): shown
// through printable() so a crafted file cannot put terminal escapes into the message.
[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error("safetensors '" + printable(path) + "': " + printable(what, 1000));
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;  // contiguous CPU copies, in the map's (sorted) order
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") bad(path, "'__metadata__' is reserved and cannot name a tensor");
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    const std::uint64_t bytes = h.numel() * dtype_size(h.dtype());
    header[name] = {{"dtype", st_dtype(h.dtype())},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(std::move(h));
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keeps the data section 8-aligned

  AtomicFile out(path);
  const std::uint64_t n = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(le, 8);
  out.write(text);
  for (const Tensor& h : host) out.write(h.raw_data(), h.numel() * dtype_size(h.dtype()));
  out.commit();  // fsync before the rename: the bytes are durable before they are visible
}

SafeTensors load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) bad(path, "cannot open file");
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) bad(path, "truncated: " + std::to_string(file_size) + " bytes, not even the 8-byte header length");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (n > file_size - 8) bad(path, "truncated or corrupt: header length " + std::to_string(n) + " exceeds the file size " + std::to_string(file_size));
  if (n > (100u << 20)) bad(path, "corrupt: header length " + std::to_string(n) + " is implausibly large");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    bad(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad(path, "header JSON is not an object");
  const std::uint64_t data_size = file_size - 8 - n;

  SafeTensors result;
  struct Entry { std::string name; DType dtype; Shape shape; std::uint64_t begin, end; };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__['" + m.key() + "'] is not a string");
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& v = it.value();
    const std::string& name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad(path, "tensor '" + name + "' lacks dtype/shape/data_offsets");
    Entry e;
    e.name = name;
    if (!v["dtype"].is_string() || !parse_st_dtype(v["dtype"].get<std::string>(), e.dtype))
      bad(path, "tensor '" + name + "' has unsupported dtype " + v["dtype"].dump() + " (wedge reads F32, F64, I32)");
    if (!v["shape"].is_array()) bad(path, "tensor '" + name + "' shape is not an array");
    // The bound is on the product of the non-zero dimensions, not on the element count: a
    // shape such as (0, 2^40, 2^40) holds no bytes, but its strides do not fit in 64 bits.
    std::uint64_t numel = 1, extent = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
        bad(path, "tensor '" + name + "' has an invalid dimension " + d.dump());
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim != 0 && extent > (std::uint64_t(1) << 48) / dim) bad(path, "tensor '" + name + "' shape is implausibly large");
      if (dim != 0) extent *= dim;
      numel *= dim;
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad(path, "tensor '" + name + "' data_offsets must be two non-negative integers");
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      bad(path, "truncated or corrupt: tensor '" + name + "' spans bytes [" + std::to_string(e.begin) + ", " +
                    std::to_string(e.end) + ") but the data section has " + std::to_string(data_size) + " bytes");
    if (e.end - e.begin != numel * dtype_size(e.dtype))
      bad(path, "tensor '" + name + "' has " + std::to_string(e.end - e.begin) + " bytes but shape " + shape_str(e.shape) +
                    " of " + std::string(dtype_name(e.dtype)) + " needs " + std::to_string(numel * dtype_size(e.dtype)));
    entries.push_back(std::move(e));
  }
  // By begin, then end: an empty tensor at a non-empty one's first byte ([4, 4] beside [4, 12])
  // comes first, so the two never count as overlapping, whatever their names' order.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  for (std::size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      bad(path, "corrupt: tensors '" + entries[i - 1].name + "' and '" + entries[i].name + "' overlap");

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(8 + n + e.begin));
    in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) bad(path, "truncated while reading tensor '" + e.name + "'");
    result.tensors[e.name] = t;
  }
  return result;
}

void assign_checked(Tensor& dst, const Tensor& src, const std::string& name, const std::string& file) {
  if (!src.defined())
    throw std::runtime_error("checkpoint '" + printable(file) + "': missing tensor '" + printable(name) + "'");
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape())
    throw std::runtime_error("checkpoint '" + printable(file) + "': tensor '" + printable(name) + "' is " + src.str() +
                             " but the model expects " + dst.str());
  dst.copy_(src);
}

}  // namespace wedge
