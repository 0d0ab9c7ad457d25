//===- Dump.cpp - LOSSJIT_DUMP_DIR artifact dumping -----------------------===//

#include "runtime/Dump.h"

#include "runtime/Environment.h"
#include "runtime/FileUtil.h"
#include "runtime/Log.h"

namespace lossjit::runtime {

namespace {
std::string sanitize(std::string_view text) {
  std::string out(text);
  for (char &c : out)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      c = '_';
  // "." and ".." would name the directory itself or its parent.
  if (out.empty() || out == "." || out == "..")
    out = "_" + out;
  return out;
}
} // namespace

Expected<std::string> dumpArtifact(std::string_view stage,
                                   std::string_view name,
                                   std::string_view text) {
  std::optional<std::string> root = getEnv("LOSSJIT_DUMP_DIR");
  if (!root || root->empty())
    return std::string();
  std::string dir = *root + "/" + sanitize(stage);
  if (Error e = createDirectories(dir))
    return std::move(e).withContext("LOSSJIT_DUMP_DIR");
  std::string path = dir + "/" + sanitize(name);
  if (Error e = writeFile(path, text))
    return std::move(e).withContext("LOSSJIT_DUMP_DIR");
  logDebug("dumped " + path);
  return path;
}

} // namespace lossjit::runtime
