//===- LaunchPlan.cpp - plan <-> attribute ---------------------------------===//

#include "compiler/Kernels/Support/LaunchPlan.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace lossjit;

namespace {
ArrayAttr strings(Builder &b, ArrayRef<std::string> values) {
  SmallVector<Attribute> attrs;
  for (const std::string &v : values)
    attrs.push_back(b.getStringAttr(v));
  return b.getArrayAttr(attrs);
}

DictionaryAttr stringMap(Builder &b, const std::map<std::string, std::string> &m) {
  SmallVector<NamedAttribute> attrs;
  for (const auto &[k, v] : m)
    attrs.push_back(b.getNamedAttr(k, b.getStringAttr(v)));
  return b.getDictionaryAttr(attrs);
}

/// Reads a list of strings; returns false when `attr` is not one.
bool readStrings(Attribute attr, std::vector<std::string> &out) {
  auto array = dyn_cast_or_null<ArrayAttr>(attr);
  if (!array)
    return false;
  for (Attribute a : array) {
    auto s = dyn_cast<StringAttr>(a);
    if (!s)
      return false;
    out.push_back(s.str());
  }
  return true;
}

std::string readString(DictionaryAttr d, StringRef key, bool &ok) {
  auto s = d.getAs<StringAttr>(key);
  if (!s) {
    ok = false;
    return {};
  }
  return s.str();
}

int64_t readInt(DictionaryAttr d, StringRef key, bool &ok) {
  auto i = d.getAs<IntegerAttr>(key);
  if (!i) {
    ok = false;
    return 0;
  }
  return i.getInt();
}
} // namespace

DictionaryAttr LaunchPlan::toAttr(MLIRContext *context) const {
  Builder b(context);
  SmallVector<Attribute> paramAttrs, wsAttrs, kernelAttrs;
  for (const PlanParam &p : params)
    paramAttrs.push_back(b.getDictionaryAttr({
        b.getNamedAttr("name", b.getStringAttr(p.name)),
        b.getNamedAttr("dtype", b.getStringAttr(p.dtype)),
        b.getNamedAttr("shape", strings(b, p.shape)),
        b.getNamedAttr("output", b.getBoolAttr(p.isOutput)),
    }));
  for (const PlanWorkspace &w : workspaces)
    wsAttrs.push_back(b.getDictionaryAttr({
        b.getNamedAttr("name", b.getStringAttr(w.name)),
        b.getNamedAttr("dtype", b.getStringAttr(w.dtype)),
        b.getNamedAttr("count", b.getStringAttr(w.count)),
    }));
  for (const PlanKernel &k : kernels) {
    SmallVector<NamedAttribute> fields = {
        b.getNamedAttr("name", b.getStringAttr(k.name)),
        b.getNamedAttr("module", b.getStringAttr(k.module)),
        b.getNamedAttr("grid", strings(b, {k.grid[0], k.grid[1], k.grid[2]})),
        b.getNamedAttr("block", b.getI64ArrayAttr(k.block)),
        b.getNamedAttr("shared_bytes", b.getI64IntegerAttr(k.sharedBytes)),
        b.getNamedAttr("args", strings(b, k.args)),
        b.getNamedAttr("parallel", b.getStringAttr(k.parallel)),
        b.getNamedAttr("per_chunk", b.getBoolAttr(k.perChunk)),
    };
    // Written only when set, like the manifest's.
    if (k.cluster > 1)
      fields.push_back(b.getNamedAttr("cluster", b.getI64IntegerAttr(k.cluster)));
    if (k.persistent)
      fields.push_back(b.getNamedAttr("persistent", b.getBoolAttr(true)));
    kernelAttrs.push_back(b.getDictionaryAttr(fields));
  }
  SmallVector<Attribute> derivedAttrs;
  for (const auto &[name, formula] : derived)
    derivedAttrs.push_back(b.getArrayAttr({b.getStringAttr(name), b.getStringAttr(formula)}));
  SmallVector<NamedAttribute> constAttrs;
  for (const auto &[k, v] : constants)
    constAttrs.push_back(b.getNamedAttr(k, b.getI64IntegerAttr(v)));
  SmallVector<NamedAttribute> fields = {
      b.getNamedAttr("entry", b.getStringAttr(entry)),
      b.getNamedAttr("entry_args", strings(b, entryArgs)),
      b.getNamedAttr("entry_results", strings(b, entryResults)),
      b.getNamedAttr("op", b.getStringAttr(op)),
      b.getNamedAttr("params", b.getArrayAttr(paramAttrs)),
      b.getNamedAttr("dims", strings(b, dims)),
      b.getNamedAttr("constants", b.getDictionaryAttr(constAttrs)),
      b.getNamedAttr("derived", b.getArrayAttr(derivedAttrs)),
      b.getNamedAttr("chunk", b.getStringAttr(chunkSymbol)),
      b.getNamedAttr("workspaces", b.getArrayAttr(wsAttrs)),
      b.getNamedAttr("kernels", b.getArrayAttr(kernelAttrs)),
      b.getNamedAttr("options", stringMap(b, options)),
      b.getNamedAttr("tile", b.getStringAttr(tile)),
  };
  // Row chunks and fully dynamic signatures are the default and not spelled
  // out.
  if (!entryArgExtents.empty()) {
    SmallVector<Attribute> extents;
    for (const std::vector<int64_t> &arg : entryArgExtents)
      extents.push_back(b.getDenseI64ArrayAttr(arg));
    fields.push_back(b.getNamedAttr("entry_arg_extents", b.getArrayAttr(extents)));
  }
  if (chunkDim != "N")
    fields.push_back(b.getNamedAttr("chunk_dim", b.getStringAttr(chunkDim)));
  if (!tensorMaps.empty()) {
    SmallVector<Attribute> maps;
    for (const PlanTensorMap &m : tensorMaps)
      maps.push_back(b.getDictionaryAttr({
          b.getNamedAttr("name", b.getStringAttr(m.name)),
          b.getNamedAttr("buffer", b.getStringAttr(m.buffer)),
          b.getNamedAttr("dims", strings(b, {m.dims[0], m.dims[1]})),
          b.getNamedAttr("box", b.getI64ArrayAttr(m.box)),
          b.getNamedAttr("swizzle", b.getI64IntegerAttr(m.swizzle)),
      }));
    fields.push_back(b.getNamedAttr("tensor_maps", b.getArrayAttr(maps)));
  }
  return b.getDictionaryAttr(fields);
}

FailureOr<LaunchPlan> LaunchPlan::fromAttr(DictionaryAttr attr, std::string &error) {
  LaunchPlan plan;
  bool ok = true;
  auto fail = [&](StringRef what) {
    error = ("malformed launch plan: " + what).str();
    return failure();
  };
  plan.entry = readString(attr, "entry", ok);
  plan.op = readString(attr, "op", ok);
  plan.tile = readString(attr, "tile", ok);
  plan.dims.clear();
  if (!ok || !readStrings(attr.get("dims"), plan.dims) ||
      !readStrings(attr.get("entry_args"), plan.entryArgs) ||
      !readStrings(attr.get("entry_results"), plan.entryResults))
    return fail("entry, entry_args, entry_results, op, tile and dims are required");
  auto params = attr.getAs<ArrayAttr>("params");
  auto workspaces = attr.getAs<ArrayAttr>("workspaces");
  auto kernels = attr.getAs<ArrayAttr>("kernels");
  auto constants = attr.getAs<DictionaryAttr>("constants");
  auto options = attr.getAs<DictionaryAttr>("options");
  if (!params || !workspaces || !kernels || !constants || !options)
    return fail("params, workspaces, kernels, constants, options are required");
  for (Attribute a : params) {
    auto d = dyn_cast<DictionaryAttr>(a);
    if (!d)
      return fail("a param is not a dictionary");
    PlanParam p;
    p.name = readString(d, "name", ok);
    p.dtype = readString(d, "dtype", ok);
    auto out = d.getAs<BoolAttr>("output");
    if (!ok || !out || !readStrings(d.get("shape"), p.shape))
      return fail("param needs name, dtype, shape, output");
    p.isOutput = out.getValue();
    plan.params.push_back(p);
  }
  for (Attribute a : workspaces) {
    auto d = dyn_cast<DictionaryAttr>(a);
    if (!d)
      return fail("a workspace is not a dictionary");
    PlanWorkspace w{readString(d, "name", ok), readString(d, "dtype", ok),
                    readString(d, "count", ok)};
    if (!ok)
      return fail("workspace needs name, dtype, count");
    plan.workspaces.push_back(w);
  }
  for (Attribute a : kernels) {
    auto d = dyn_cast<DictionaryAttr>(a);
    if (!d)
      return fail("a kernel is not a dictionary");
    PlanKernel k;
    k.name = readString(d, "name", ok);
    k.module = readString(d, "module", ok);
    k.sharedBytes = readInt(d, "shared_bytes", ok);
    std::vector<std::string> grid;
    auto block = d.getAs<ArrayAttr>("block");
    k.parallel = readString(d, "parallel", ok);
    auto perChunk = d.getAs<BoolAttr>("per_chunk");
    if (!ok || !readStrings(d.get("grid"), grid) || grid.size() != 3 || !block ||
        block.size() != 3 || !perChunk || !readStrings(d.get("args"), k.args))
      return fail("kernel needs name, module, grid[3], block[3], shared_bytes, args, "
                  "parallel, per_chunk");
    for (int i = 0; i < 3; ++i) {
      k.grid[i] = grid[i];
      auto bi = dyn_cast<IntegerAttr>(block[i]);
      if (!bi)
        return fail("kernel block entries must be integers");
      k.block[i] = bi.getInt();
    }
    k.perChunk = perChunk.getValue();
    if (Attribute cluster = d.get("cluster")) {
      auto size = dyn_cast<IntegerAttr>(cluster);
      if (!size || size.getInt() < 1)
        return fail("kernel cluster must be a positive integer");
      k.cluster = size.getInt();
    }
    if (Attribute persistent = d.get("persistent")) {
      auto flag = dyn_cast<BoolAttr>(persistent);
      if (!flag)
        return fail("kernel persistent must be a bool");
      k.persistent = flag.getValue();
    }
    plan.kernels.push_back(k);
  }
  if (Attribute extents = attr.get("entry_arg_extents")) {
    auto array = dyn_cast<ArrayAttr>(extents);
    if (!array || array.size() != plan.entryArgs.size())
      return fail("entry_arg_extents must hold one i64 array per entry argument");
    for (Attribute a : array) {
      auto arg = dyn_cast<DenseI64ArrayAttr>(a);
      if (!arg)
        return fail("entry_arg_extents must hold one i64 array per entry argument");
      plan.entryArgExtents.emplace_back(arg.asArrayRef().begin(), arg.asArrayRef().end());
    }
  }
  plan.chunkSymbol = readString(attr, "chunk", ok);
  if (auto dim = attr.getAs<StringAttr>("chunk_dim"))
    plan.chunkDim = dim.str();
  if (plan.chunkDim != "N" && plan.chunkDim != "V")
    return fail("chunk_dim must be N or V");
  auto derived = attr.getAs<ArrayAttr>("derived");
  if (!ok || !derived)
    return fail("chunk and derived are required");
  for (Attribute a : derived) {
    std::vector<std::string> pair;
    if (!readStrings(a, pair) || pair.size() != 2)
      return fail("derived entries are [name, formula] pairs");
    plan.derived.push_back({pair[0], pair[1]});
  }
  for (NamedAttribute c : constants) {
    auto i = dyn_cast<IntegerAttr>(c.getValue());
    if (!i)
      return fail("constants must be integers");
    plan.constants[c.getName().str()] = i.getInt();
  }
  for (NamedAttribute o : options) {
    auto s = dyn_cast<StringAttr>(o.getValue());
    if (!s)
      return fail("options must be strings");
    plan.options[o.getName().str()] = s.str();
  }
  if (Attribute maps = attr.get("tensor_maps")) {
    auto array = dyn_cast<ArrayAttr>(maps);
    if (!array)
      return fail("tensor_maps must be a list");
    for (auto [index, a] : llvm::enumerate(array)) {
      auto d = dyn_cast<DictionaryAttr>(a);
      std::string which = "tensor_maps[" + std::to_string(index) + "]";
      std::vector<std::string> dims;
      auto box = d ? d.getAs<ArrayAttr>("box") : ArrayAttr();
      PlanTensorMap m;
      if (d) {
        m.name = readString(d, "name", ok);
        m.buffer = readString(d, "buffer", ok);
        m.swizzle = readInt(d, "swizzle", ok);
      }
      if (!d || !ok || !readStrings(d.get("dims"), dims) || dims.size() != 2 || !box ||
          box.size() != 2)
        return fail(which + " needs name, buffer, dims[2], box[2], swizzle");
      m.dims = {dims[0], dims[1]};
      for (int i = 0; i < 2; ++i) {
        auto bi = dyn_cast<IntegerAttr>(box[i]);
        if (!bi)
          return fail(which + ".box entries must be integers");
        m.box[i] = bi.getInt();
      }
      plan.tensorMaps.push_back(m);
    }
  }
  return plan;
}

llvm::Error lossjit::checkDeclaredExtents(const LaunchPlan &plan,
                                          const std::map<std::string, int64_t> &symbols) {
  auto shapeText = [](ArrayRef<int64_t> extents) {
    std::string text;
    for (auto [i, e] : llvm::enumerate(extents))
      text += (i ? "x" : "") + (e < 0 ? std::string("?") : std::to_string(e));
    return text;
  };
  for (auto [index, extents] : llvm::enumerate(plan.entryArgExtents)) {
    const std::string &role = index < plan.entryArgs.size() ? plan.entryArgs[index] : "";
    // An argument the op does not read has no param (and no size) to check.
    auto param = llvm::find_if(plan.params, [&](const PlanParam &p) { return p.name == role; });
    if (role.empty() || param == plan.params.end())
      continue;
    for (auto [dim, declared] : llvm::enumerate(extents)) {
      if (declared < 0 || dim >= param->shape.size())
        continue;
      const std::string &entry = param->shape[dim];
      int64_t actual;
      if (StringRef(entry).getAsInteger(10, actual)) {
        auto it = symbols.find(entry);
        if (it == symbols.end())
          return llvm::createStringError("argument " + std::to_string(index) + " ('" + role +
                                         "') of @" + plan.entry + ": dimension " +
                                         std::to_string(dim) + " is '" + entry +
                                         "', which is no dim or constant of the plan");
        actual = it->second;
      }
      if (actual != declared)
        return llvm::createStringError(
            "argument " + std::to_string(index) + " ('" + role + "') of @" + plan.entry +
            " is declared " + shapeText(extents) + ": dimension " + std::to_string(dim) + " (" +
            entry + ") must be " + std::to_string(declared) + ", the input has " +
            std::to_string(actual));
    }
  }
  return llvm::Error::success();
}

void lossjit::attachLaunchPlan(Operation *module, const LaunchPlan &plan) {
  MLIRContext *ctx = module->getContext();
  NamedAttrList plans;
  if (auto existing = module->getAttrOfType<DictionaryAttr>(kLaunchPlansAttrName))
    plans.append(existing.getValue());
  plans.set(plan.entry, plan.toAttr(ctx));
  module->setAttr(kLaunchPlansAttrName, plans.getDictionary(ctx));
}

FailureOr<std::vector<LaunchPlan>> lossjit::readLaunchPlans(Operation *module, std::string &error) {
  auto plans = module->getAttrOfType<DictionaryAttr>(kLaunchPlansAttrName);
  if (!plans) {
    error = "the module has no loss.launch_plans: nothing was lowered (is "
            "there a func.func whose body is one loss.linear_cross_entropy?)";
    return failure();
  }
  std::vector<LaunchPlan> result;
  for (NamedAttribute entry : plans) {
    auto dict = dyn_cast<DictionaryAttr>(entry.getValue());
    if (!dict) {
      error = "loss.launch_plans entries must be dictionaries";
      return failure();
    }
    FailureOr<LaunchPlan> plan = LaunchPlan::fromAttr(dict, error);
    if (failed(plan))
      return failure();
    result.push_back(std::move(*plan));
  }
  return result;
}
