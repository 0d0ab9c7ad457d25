//===- PtxSignature.cpp ---------------------------------------------------===//

#include "tools/lossjit-aot/PtxSignature.h"

#include <cctype>
#include <sstream>

namespace lossjit::aot {

namespace {
bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return s.substr(b, e - b);
}

int typeBytes(const std::string &type) {
  // .u64, .s32, .b16, .f32, .pred ...
  size_t digits = type.find_first_of("0123456789");
  if (digits == std::string::npos)
    return 0;
  return std::atoi(type.c_str() + digits) / 8;
}
} // namespace

runtime::Expected<std::vector<PtxParam>> parsePtxEntryParams(const std::string &ptx,
                                                             const std::string &entry) {
  // Find ".entry <name>" with <name> delimited on both sides.
  size_t at = 0;
  while (true) {
    at = ptx.find(".entry", at);
    if (at == std::string::npos)
      return runtime::makeError("PTX has no .entry " + entry);
    size_t p = at + 6;
    while (p < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[p])))
      ++p;
    if (ptx.compare(p, entry.size(), entry) == 0 &&
        (p + entry.size() == ptx.size() || !isNameChar(ptx[p + entry.size()]))) {
      at = p + entry.size();
      break;
    }
    at = p;
  }
  while (at < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[at])))
    ++at;
  std::vector<PtxParam> params;
  if (at >= ptx.size() || ptx[at] != '(')
    return params; // an entry without parameters
  size_t close = ptx.find(')', at);
  if (close == std::string::npos)
    return runtime::makeError(".entry " + entry + ": unterminated parameter list");
  std::string list = ptx.substr(at + 1, close - at - 1);
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trim(item);
    if (item.empty())
      continue;
    std::stringstream words(item);
    std::string word;
    PtxParam param;
    bool sawParam = false;
    while (words >> word) {
      if (word == ".param") {
        sawParam = true;
      } else if (word == ".ptr") {
        param.isPointer = true;
      } else if (word == ".align") {
        words >> param.align;
      } else if (word.size() > 1 && word[0] == '.' && param.type.empty() &&
                 (word[1] == 'u' || word[1] == 's' || word[1] == 'b' ||
                  word[1] == 'f' || word == ".pred")) {
        param.type = word.substr(1);
      } else if (size_t open = word.find('['); open != std::string::npos) {
        param.elements = std::atoi(word.c_str() + open + 1);
      }
    }
    if (!sawParam || param.type.empty())
      return runtime::makeError(".entry " + entry + ": cannot read parameter '" +
                                item + "'");
    params.push_back(param);
  }
  return params;
}

std::vector<PlanSlot> planSlots(const runtime::KernelBundle &bundle, size_t index) {
  std::vector<PlanSlot> slots;
  auto isIn = [](const auto &list, const std::string &name) {
    for (const auto &item : list)
      if (item.name == name)
        return true;
    return false;
  };
  for (const std::string &arg : bundle.kernels[index].args) {
    if (isIn(bundle.tensorMaps, arg)) {
      slots.push_back({arg, "tensor_map", "map"});
      continue;
    }
    bool param = isIn(bundle.params, arg);
    bool workspace = !param && isIn(bundle.workspaces, arg);
    if (param || workspace) {
      for (const char *field : {"allocated", "aligned", "offset", "size", "stride"})
        slots.push_back({arg, param ? "buffer" : "workspace", field});
      continue;
    }
    std::string kind = "symbol"; // derived or chunk_begin / chunk_end
    for (const std::string &d : bundle.dims)
      if (d == arg)
        kind = "dim";
    for (const auto &c : bundle.constants)
      if (c.first == arg)
        kind = "constant";
    slots.push_back({arg, kind, "value"});
  }
  return slots;
}

runtime::Error checkPtxAbi(const runtime::KernelBundle &bundle, size_t index,
                           const std::string &ptx) {
  const runtime::BundleKernel &kernel = bundle.kernels[index];
  auto params = parsePtxEntryParams(ptx, kernel.name);
  if (!params)
    return std::move(params.takeError()).withContext("kernel '" + kernel.name + "'");
  std::vector<PlanSlot> slots = planSlots(bundle, index);
  if (params->size() != slots.size())
    return runtime::makeError(
        "kernel '" + kernel.name + "' (" + bundle.arch + "): the PTX entry takes " +
        std::to_string(params->size()) + " parameters, the launch plan passes " +
        std::to_string(slots.size()) + " (memref ABI: 5 per buffer, 1 per dim)");
  for (size_t i = 0; i < slots.size(); ++i) {
    const PtxParam &p = (*params)[i];
    if (slots[i].kind == "tensor_map") {
      if (typeBytes(p.type) != 1 || p.elements != 128 || p.align != 64)
        return runtime::makeError("kernel '" + kernel.name + "' (" + bundle.arch +
                                  "): PTX parameter " + std::to_string(i) + " is ." + p.type +
                                  "[" + std::to_string(p.elements) + "] aligned " +
                                  std::to_string(p.align) + ", the launcher passes tensor map " +
                                  slots[i].arg + " (.align 64 .b8 [128])");
      continue;
    }
    if (typeBytes(p.type) != 8 || p.elements != 1)
      return runtime::makeError("kernel '" + kernel.name + "' (" + bundle.arch +
                                "): PTX parameter " + std::to_string(i) + " is ." +
                                (*params)[i].type + ", the launcher passes 8 bytes (" +
                                slots[i].arg + "." + slots[i].field + ")");
  }
  return runtime::Error::success();
}

} // namespace lossjit::aot
