// Checkpoint files: the bytes of a .safetensors file into load_safetensors, the reader
// behind `--resume`, eval, generate and classify. The reader promises a std::runtime_error
// naming the file for anything it cannot read; a file it accepts must hold exactly what it
// says, and saving what was read and reading it back must give the same tensors.
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "engine/safetensors.h"
#include "fuzz_support.h"

using namespace wedge;

namespace {

std::string bytes_of(const Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
  return n == 0 ? std::string() : std::string(static_cast<const char*>(t.raw_data()), n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::ScratchFile input("input.safetensors");
  static const fuzz::ScratchFile copy("copy.safetensors");
  SafeTensors st;
  try {
    st = load_safetensors(input.write(fuzz::as_text(data, size)).string());
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::strstr(e.what(), input.path().c_str()) != nullptr);  // the message names the file
    return 0;
  }
  std::size_t payload = 0;
  for (const auto& [name, t] : st.tensors) {
    FUZZ_CHECK(name != "__metadata__");
    FUZZ_CHECK(t.defined() && t.device() == Device::cpu() && t.is_contiguous());
    for (const std::int64_t d : t.shape()) FUZZ_CHECK(d >= 0);
    payload += bytes_of(t).size();  // reads every byte: the sanitizer sees an overrun
  }
  FUZZ_CHECK(payload <= size);

  save_safetensors(copy.path().string(), st.tensors, st.metadata);
  const SafeTensors back = load_safetensors(copy.path().string());
  FUZZ_CHECK(back.metadata == st.metadata);
  FUZZ_CHECK(back.tensors.size() == st.tensors.size());
  for (const auto& [name, t] : st.tensors) {
    const auto it = back.tensors.find(name);
    FUZZ_CHECK(it != back.tensors.end());
    FUZZ_CHECK(it->second.dtype() == t.dtype() && it->second.shape() == t.shape());
    FUZZ_CHECK(bytes_of(it->second) == bytes_of(t));
  }
  return 0;
}
