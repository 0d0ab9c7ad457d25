//===- CpuTarget.cpp -----------------------------------------------------===//

#include "compiler/Target/CpuTarget.h"
#include "runtime/Environment.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <algorithm>
#include <mutex>

using namespace lossjit;

namespace {
void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

llvm::Expected<const llvm::Target *> lookupCpuTarget(const std::string &triple) {
  initializeNativeTarget();
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(llvm::Triple(triple), error);
  if (!target)
    return llvm::createStringError("no LLVM code generator for the host triple " + triple + ": " +
                                   error);
  return target;
}

/// "+a,+b,-c" from the host's feature map, sorted so the text is canonical.
std::string hostFeatureString() {
  std::vector<std::string> parts;
  for (const auto &f : llvm::sys::getHostCPUFeatures())
    parts.push_back((f.second ? "+" : "-") + f.first().str());
  llvm::sort(parts,
             [](const std::string &a, const std::string &b) { return a.substr(1) < b.substr(1); });
  return llvm::join(parts, ",");
}

/// The ISA features a named x86 CPU implies, as "+a,+b", sorted.
std::string x86FeatureString(llvm::StringRef cpu) {
  llvm::SmallVector<llvm::StringRef> features;
  llvm::X86::getFeaturesForCPU(cpu, features, /*NeedPlus=*/true);
  std::vector<std::string> parts(features.begin(), features.end());
  llvm::sort(parts);
  return llvm::join(parts, ",");
}

bool isX86(const llvm::Triple &triple) {
  return triple.getArch() == llvm::Triple::x86_64 || triple.getArch() == llvm::Triple::x86;
}
} // namespace

std::vector<std::string> lossjit::featuresMissingOnHost(llvm::StringRef cpu) {
  if (!isX86(llvm::Triple(llvm::sys::getProcessTriple())))
    return {};
  return missingFeatures(cpu, llvm::sys::getHostCPUFeatures());
}

std::vector<std::string> lossjit::missingFeatures(llvm::StringRef cpu,
                                                  const llvm::StringMap<bool> &host) {
  llvm::SmallVector<llvm::StringRef> features;
  llvm::X86::getFeaturesForCPU(cpu, features, /*NeedPlus=*/false);
  std::vector<std::string> missing;
  for (llvm::StringRef f : features) {
    // Features the host probe does not report at all (64bit, cmov, sse2,
    // x87, ...) are the x86-64 baseline every host has.
    auto it = host.find(f);
    if (it != host.end() && !it->second)
      missing.push_back(f.str());
  }
  llvm::sort(missing);
  return missing;
}

llvm::Expected<CpuTarget> CpuTarget::resolve(llvm::StringRef spec, llvm::StringRef what) {
  CpuTarget t;
  t.spec = spec.str();
  t.triple = llvm::sys::getProcessTriple();
  auto target = lookupCpuTarget(t.triple);
  if (!target)
    return target.takeError();
  if (spec == "native") {
    t.cpu = llvm::sys::getHostCPUName().str();
    t.features = hostFeatureString();
    return t;
  }
  const std::string expected =
      "expected native, x86-64-v2, x86-64-v3, x86-64-v4 or another CPU name LLVM "
      "knows (e.g. skylake-avx512, znver4)";
  if (spec.empty())
    return llvm::createStringError(what + " is empty; " + expected);
  llvm::Triple triple(t.triple);
  std::unique_ptr<llvm::MCSubtargetInfo> generic((*target)->createMCSubtargetInfo(triple, "", ""));
  if (!generic || !generic->isCPUStringValid(spec))
    return llvm::createStringError(what + " '" + spec + "' is not a CPU LLVM " +
                                   LOSSJIT_LLVM_VERSION + " knows for " + t.triple + "; " +
                                   expected);
  std::vector<std::string> missing = featuresMissingOnHost(spec);
  if (!missing.empty())
    return llvm::createStringError(
        what + " '" + spec + "' needs CPU features this host lacks (" + llvm::join(missing, ", ") +
        "): code compiled for it would stop with an illegal instruction here; pick "
        "native or an older CPU level");
  t.cpu = spec.str();
  // A named CPU means exactly the features it implies, whatever this host
  // has beyond them (that is the point of naming it).
  t.features = isX86(triple) ? x86FeatureString(spec) : "";
  return t;
}

llvm::Expected<CpuTarget> CpuTarget::fromEnvironment() {
  std::optional<std::string> value = runtime::getEnv(kCpuTargetVariable);
  if (!value || value->empty())
    return resolve("native", kCpuTargetVariable);
  return resolve(llvm::StringRef(*value).trim(), kCpuTargetVariable);
}

bool CpuTarget::hasFeature(llvm::StringRef feature) const {
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(features).split(parts, ',');
  return llvm::is_contained(parts, ("+" + feature).str());
}

bool CpuTarget::hasFmaUnits() const {
  if (!llvm::Triple(triple).isX86())
    return true;
  return hasFeature("fma") || hasFeature("fma4");
}

int64_t CpuTarget::vectorRegisters(int64_t lanes) const {
  int64_t count = 16, bits = 128;
  if (hasFeature("avx512f"))
    count = 32, bits = 512;
  else if (hasFeature("avx"))
    bits = 256;
  int64_t perValue = std::max<int64_t>(1, (32 * lanes + bits - 1) / bits);
  return count / perValue;
}

std::string CpuTarget::key() const { return triple + ";cpu=" + cpu + ";features=" + features; }

llvm::Expected<std::unique_ptr<llvm::TargetMachine>> CpuTarget::createTargetMachine() const {
  auto target = lookupCpuTarget(triple);
  if (!target)
    return target.takeError();
  llvm::TargetOptions options;
  // Only explicit fma instructions fuse: a multiply-add the kernel wrote as
  // two ops stays two roundings on every CPU, so the bits do not depend on
  // whether the target has FMA units.
  options.AllowFPOpFusion = llvm::FPOpFusion::Standard;
  std::unique_ptr<llvm::TargetMachine> tm((*target)->createTargetMachine(
      llvm::Triple(triple), cpu, features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive, /*JIT=*/true));
  if (!tm)
    return llvm::createStringError("LLVM could not create a code generator for cpu " + cpu +
                                   " on " + triple);
  return tm;
}
