//===- CpuCodegen.cpp ----------------------------------------------------===//

#include "compiler/Target/CpuCodegen.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <cmath>
#include <cstring>

using namespace lossjit;

namespace {
/// Defines `_mlir_<name>(ptr args)` for every function of `module`: it loads
/// argument i from the pointer args[i] and calls <name>. The runtime calls
/// kernels only through these (CpuCompiledOp::invoke), so one signature
/// serves every kernel. The same convention as mlir::ExecutionEngine's.
void addPackedEntryPoints(llvm::Module &module) {
  llvm::LLVMContext &ctx = module.getContext();
  llvm::IRBuilder<> builder(ctx);
  std::vector<llvm::Function *> kernels;
  for (llvm::Function &f : module.functions())
    if (!f.isDeclaration())
      kernels.push_back(&f);
  for (llvm::Function *f : kernels) {
    auto *type = llvm::FunctionType::get(builder.getVoidTy(), builder.getPtrTy(),
                                         /*isVarArg=*/false);
    auto *packed = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                                          "_mlir_" + f->getName(), module);
    builder.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", packed));
    llvm::Value *list = packed->getArg(0);
    llvm::SmallVector<llvm::Value *> args;
    for (auto [i, arg] : llvm::enumerate(f->args())) {
      llvm::Value *slot = builder.CreateGEP(builder.getPtrTy(), list, builder.getInt64(i));
      llvm::Value *pointer = builder.CreateLoad(builder.getPtrTy(), slot);
      args.push_back(builder.CreateLoad(arg.getType(), pointer));
    }
    llvm::Value *result = builder.CreateCall(f, args);
    if (!result->getType()->isVoidTy()) {
      llvm::Value *slot =
          builder.CreateGEP(builder.getPtrTy(), list, builder.getInt64(f->arg_size()));
      builder.CreateStore(result, builder.CreateLoad(builder.getPtrTy(), slot));
    }
    builder.CreateRetVoid();
  }
}

float exactFmaF32(float a, float b, float c) { return std::fma(a, b, c); }
double exactFmaF64(double a, double b, double c) { return std::fma(a, b, c); }
} // namespace

const std::map<std::string, void *> &lossjit::cpuRuntimeSymbols() {
  // std::fma is exactly rounded (IEEE 754 fusedMultiplyAdd) in every C
  // library, with or without FMA hardware, so a target without FMA units
  // computes the same bits as one with them — only slower.
  static const std::map<std::string, void *> symbols = {
      {"fmaf", reinterpret_cast<void *>(&exactFmaF32)},
      {"fma", reinterpret_cast<void *>(&exactFmaF64)},
      {"memcpy", reinterpret_cast<void *>(&::memcpy)},
      {"memmove", reinterpret_cast<void *>(&::memmove)},
      {"memset", reinterpret_cast<void *>(&::memset)},
  };
  return symbols;
}

llvm::Expected<std::string> lossjit::emitCpuObject(mlir::ModuleOp kernels,
                                                    const CpuTarget &target) {
  auto tm = target.createTargetMachine();
  if (!tm)
    return tm.takeError();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module =
      mlir::translateModuleToLLVMIR(kernels, context, "lossjit-host-kernels");
  if (!module)
    return llvm::createStringError("translating the host kernels to LLVM IR failed");
  module->setTargetTriple((*tm)->getTargetTriple());
  module->setDataLayout((*tm)->createDataLayout());
  addPackedEntryPoints(*module);
  auto optimize = mlir::makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, tm->get());
  if (llvm::Error err = optimize(module.get()))
    return llvm::createStringError("optimizing the host kernels failed: " +
                                   llvm::toString(std::move(err)));
  llvm::SmallVector<char, 0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager codegen;
  if ((*tm)->addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    return llvm::createStringError("LLVM cannot emit an object file for " + target.key());
  codegen.run(*module);
  std::string object(bytes.begin(), bytes.end());
  if (llvm::Error err = checkCpuObjectSymbols(object))
    return std::move(err);
  return object;
}

llvm::Expected<std::vector<std::string>> lossjit::undefinedSymbols(llvm::StringRef object) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(object, "lossjit-host-kernels"));
  if (!file)
    return llvm::createStringError("not an object file: " + llvm::toString(file.takeError()));
  std::vector<std::string> names;
  for (const llvm::object::SymbolRef &symbol : (*file)->symbols()) {
    auto flags = symbol.getFlags();
    if (!flags)
      return flags.takeError();
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined))
      continue;
    auto name = symbol.getName();
    if (!name)
      return name.takeError();
    if (!name->empty())
      names.push_back(name->str());
  }
  llvm::sort(names);
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

llvm::Error lossjit::checkCpuObjectSymbols(llvm::StringRef object) {
  auto names = undefinedSymbols(object);
  if (!names)
    return names.takeError();
  std::vector<std::string> unknown;
  for (const std::string &name : *names)
    // The GOT of position-independent code is the JIT linker's own.
    if (name != "_GLOBAL_OFFSET_TABLE_" && !cpuRuntimeSymbols().count(name))
      unknown.push_back(name);
  if (unknown.empty())
    return llvm::Error::success();
  return llvm::createStringError(
      "the host kernels call " + llvm::join(unknown, ", ") +
      ", which lossjit does not provide (a compiler-runtime or libm routine a "
      "host may lack or implement differently); the CPU pipeline must expand it "
      "(see loss-expand-host-libcalls)");
}

llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> lossjit::linkCpuObject(llvm::StringRef object) {
  if (llvm::Error err = checkCpuObjectSymbols(object))
    return std::move(err);
  // No process symbols and no platform: the object sees exactly the
  // routines below, so resolution cannot differ between hosts.
  auto jit = llvm::orc::LLJITBuilder()
                 .setLinkProcessSymbolsByDefault(false)
                 .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                 .create();
  if (!jit)
    return jit.takeError();
  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  for (const auto &[name, address] : cpuRuntimeSymbols())
    symbols[mangle(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                             llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  if (llvm::Error err =
          (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols))))
    return std::move(err);
  if (llvm::Error err = (*jit)->addObjectFile(
          llvm::MemoryBuffer::getMemBufferCopy(object, "lossjit-host-kernels")))
    return std::move(err);
  return std::move(*jit);
}
