#include "engine/device.h"

#include <stdexcept>

namespace wedge {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos)
      return cuda(std::stoi(idx));
  }
  throw std::invalid_argument("unknown device '" + text + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace wedge
