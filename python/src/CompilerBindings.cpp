//===- CompilerBindings.cpp - the _lossjit extension: compiler half -------===//
//
// Graphs are built op by op through `GraphBuilder` (never by formatting MLIR
// text): the `@lossjit.jit` decorator drives it from a trace, and `lce_graph`
// wraps the C++ preset builder. A `Graph` compiles to a `CpuOp` (LLVM JIT)
// or a `GpuOp` (PTX through the kernel cache).
//
// All MLIR work shares one context and is serialized by one mutex; long
// compilations release the GIL first (and never take it back while holding
// the mutex, so the two locks cannot deadlock).
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Builder/VocabReduceGraph.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/BundleBuilder.h"
#include "compiler/Target/CpuJit.h"
#include "compiler/Target/PtxEmitter.h"
#include "dialects/Loss/LossOps.h"
#include "runtime/Sha256.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <pybind11/stl.h>

#include <mutex>
#include <optional>

namespace py = pybind11;
using namespace mlir;
using namespace lossjit;
using namespace lossjit::python;

namespace {

struct CompilerState {
  std::mutex mutex;
  std::unique_ptr<MLIRContext> context;
};

CompilerState &state() {
  // Leaked: MLIR contexts must outlive every module, including those Python
  // frees during interpreter teardown.
  static CompilerState *s = [] {
    auto *st = new CompilerState();
    DialectRegistry registry;
    registerLossJITDialects(registry);
    registerLossJITPasses();
    st->context = std::make_unique<MLIRContext>(registry);
    st->context->loadDialect<loss::LossDialect, func::FuncDialect>();
    return st;
  }();
  return *s;
}

/// Collects the diagnostics emitted while it lives.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *ctx)
      : handler(ctx, [this](Diagnostic &d) {
          std::string text;
          llvm::raw_string_ostream os(text);
          if (!isa<UnknownLoc>(d.getLocation()))
            os << d.getLocation() << ": ";
          os << d;
          for (const Diagnostic &note : d.getNotes())
            os << "\n  note: " << note;
          messages.push_back(text);
          return success();
        }) {}
  std::string join(const std::string &fallback) const {
    if (messages.empty())
      return fallback;
    std::string out;
    for (const auto &m : messages)
      out += (out.empty() ? "" : "\n") + m;
    return out;
  }

private:
  std::vector<std::string> messages;
  ScopedDiagnosticHandler handler;
};

std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

/// A built `loss` graph (a module with one function).
struct Graph {
  OwningOpRef<ModuleOp> module;
  std::string name;

  ~Graph() {
    std::lock_guard<std::mutex> lock(state().mutex);
    module = nullptr;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(state().mutex);
    return printModule(*module);
  }
};

Type storageType(MLIRContext *ctx, const std::string &dtype) {
  if (dtype == "f16")
    return Float16Type::get(ctx);
  if (dtype == "bf16")
    return BFloat16Type::get(ctx);
  if (dtype == "f32")
    return Float32Type::get(ctx);
  if (dtype == "f64")
    return Float64Type::get(ctx);
  if (dtype == "i32")
    return IntegerType::get(ctx, 32);
  if (dtype == "i64")
    return IntegerType::get(ctx, 64);
  throw py::value_error("dtype must be one of f16, bf16, f32, f64, i32, i64; got '" +
                        dtype + "'");
}

std::string typeName(Type t) {
  if (t.isF16())
    return "f16";
  if (t.isBF16())
    return "bf16";
  if (t.isF32())
    return "f32";
  if (t.isF64())
    return "f64";
  if (t.isInteger(32))
    return "i32";
  if (t.isInteger(64))
    return "i64";
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

loss::Reduction parseReduction(const std::string &r) {
  auto red = loss::symbolizeReduction(r);
  if (!red)
    throw py::value_error("reduction must be 'none', 'mean' or 'sum'; got '" + r + "'");
  return *red;
}

/// Builds one function op by op. Values are handed to Python as integers.
class GraphBuilder {
public:
  explicit GraphBuilder(const std::string &name) : name(name) {
    if (name.empty())
      throw py::value_error("graph name must not be empty");
    std::lock_guard<std::mutex> lock(state().mutex);
    MLIRContext *ctx = state().context.get();
    OpBuilder b(ctx);
    module = ModuleOp::create(UnknownLoc::get(ctx));
    b.setInsertionPointToEnd(module->getBody());
    fn = func::FuncOp::create(b, UnknownLoc::get(ctx), name,
                              b.getFunctionType({}, {}));
    entry = fn.addEntryBlock();
  }
  ~GraphBuilder() {
    std::lock_guard<std::mutex> lock(state().mutex);
    module = nullptr;
  }

  int argument(const std::string &dtype, int64_t rank, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    if (rank < 0 || rank > 2)
      throw py::value_error("argument rank must be 0, 1 or 2, got " +
                            std::to_string(rank));
    MLIRContext *ctx = state().context.get();
    Type t = tensorType(storageType(ctx, dtype), rank);
    return push(entry->addArgument(t, location(loc)));
  }

  int linear(int x, int w, std::optional<int> bias, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value xv = get(x), wv = get(w);
    Type result = tensorType(cast_(xv).getElementType(), 2);
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::LinearOp::create(b, l, result, xv, wv,
                                    bias ? get(*bias) : Value())
          .getOperation();
    });
  }

  int cast(int v, const std::string &dtype, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value in = get(v);
    auto t = cast_(in);
    Type result = RankedTensorType::get(t.getShape(),
                                        storageType(state().context.get(), dtype));
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::CastOp::create(b, l, result, in).getOperation();
    });
  }

  int logSoftmax(int v, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value in = get(v);
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::LogSoftmaxOp::create(b, l, in.getType(), in).getOperation();
    });
  }

  int logsumexp(int v, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value in = get(v);
    auto t = cast_(in);
    Type result = tensorType(t.getElementType(), std::max<int64_t>(t.getRank() - 1, 0));
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::LogSumExpOp::create(b, l, result, in).getOperation();
    });
  }

  /// z · factor (loss.scale); a bad factor is a ValueError from the verifier.
  int scale(int v, double factor, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value in = get(v);
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::ScaleOp::create(b, l, in.getType(), in, b.getF64FloatAttr(factor))
          .getOperation();
    });
  }

  /// cap · tanh(z / cap) (loss.softcap).
  int softcap(int v, double cap, const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    Value in = get(v);
    return create(loc, [&](OpBuilder &b, Location l) {
      return loss::SoftcapOp::create(b, l, in.getType(), in, b.getF64FloatAttr(cap))
          .getOperation();
    });
  }

  int nll(int logp, int labels, int64_t ignoreIndex, const std::string &reduction,
          const std::string &loc) {
    return nllLike<loss::NllOp>(logp, labels, ignoreIndex, reduction, loc);
  }

  int crossEntropy(int logits, int labels, int64_t ignoreIndex,
                   const std::string &reduction, const std::string &loc) {
    return nllLike<loss::CrossEntropyOp>(logits, labels, ignoreIndex, reduction, loc);
  }

  std::string dtype(int v) {
    std::lock_guard<std::mutex> lock(state().mutex);
    return typeName(cast_(get(v)).getElementType());
  }
  int64_t rank(int v) {
    std::lock_guard<std::mutex> lock(state().mutex);
    return cast_(get(v)).getRank();
  }

  std::unique_ptr<Graph> finish(const std::vector<int> &results) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    if (results.empty())
      throw py::value_error("a graph needs at least one result");
    MLIRContext *ctx = state().context.get();
    OpBuilder b = OpBuilder::atBlockEnd(entry);
    SmallVector<Value> values;
    SmallVector<Type> types;
    for (int r : results) {
      values.push_back(get(r));
      types.push_back(values.back().getType());
    }
    func::ReturnOp::create(b, UnknownLoc::get(ctx), values);
    fn.setFunctionType(b.getFunctionType(entry->getArgumentTypes(), types));
    DiagnosticCollector diags(ctx);
    if (failed(mlir::verify(*module)))
      throw py::value_error("invalid graph: " + diags.join("verification failed"));
    auto graph = std::make_unique<Graph>();
    graph->module = std::move(module);
    graph->name = name;
    finished = true;
    return graph;
  }

private:
  static RankedTensorType cast_(Value v) {
    return llvm::cast<RankedTensorType>(v.getType());
  }

  RankedTensorType tensorType(Type element, int64_t rank) {
    return RankedTensorType::get(SmallVector<int64_t>(rank, ShapedType::kDynamic),
                                 element);
  }

  Location location(const std::string &loc) {
    MLIRContext *ctx = state().context.get();
    if (loc.empty())
      return UnknownLoc::get(ctx);
    return NameLoc::get(StringAttr::get(ctx, loc));
  }

  void checkOpen() const {
    if (finished)
      throw py::value_error("this GraphBuilder is finished; start a new one");
  }

  Value get(int handle) const {
    if (handle < 0 || handle >= static_cast<int>(values.size()))
      throw py::index_error("unknown graph value " + std::to_string(handle));
    return values[handle];
  }

  int push(Value v) {
    values.push_back(v);
    return static_cast<int>(values.size()) - 1;
  }

  template <typename OpT>
  int nllLike(int in, int labels, int64_t ignoreIndex, const std::string &reduction,
              const std::string &loc) {
    std::lock_guard<std::mutex> lock(state().mutex);
    checkOpen();
    MLIRContext *ctx = state().context.get();
    loss::Reduction red = parseReduction(reduction);
    Value inV = get(in), labelV = get(labels);
    Type compute = loss::computeTypeFor(cast_(inV).getElementType());
    Type result = red == loss::Reduction::none ? Type(tensorType(compute, 1))
                                               : Type(tensorType(compute, 0));
    return create(loc, [&](OpBuilder &b, Location l) {
      return OpT::create(b, l, result, inV, labelV,
                         b.getI64IntegerAttr(ignoreIndex),
                         loss::ReductionAttr::get(ctx, red))
          .getOperation();
    });
  }

  /// Creates an op at the end of the body and verifies it at once, so a
  /// wrong operand is reported at the call that made it.
  template <typename Fn> int create(const std::string &loc, Fn &&make) {
    MLIRContext *ctx = state().context.get();
    OpBuilder b = OpBuilder::atBlockEnd(entry);
    DiagnosticCollector diags(ctx);
    Operation *op = make(b, location(loc));
    if (failed(mlir::verify(op))) {
      std::string message = diags.join("verification failed");
      op->erase();
      throw py::value_error(message);
    }
    return push(op->getResult(0));
  }

  std::string name;
  OwningOpRef<ModuleOp> module;
  func::FuncOp fn;
  Block *entry = nullptr;
  std::vector<Value> values;
  bool finished = false;
};

/// Whether the preset builder has the backward options (detected, so this
/// file builds before and after the gradient builder lands).
template <typename T>
constexpr bool hasBackwardOptions = requires(T &g) {
  g.gradient;
  g.strategy;
  g.needsGradX;
  g.needsGradW;
  g.workspaceBytes;
};

/// Whether the preset builder has the fused forward+backward (one pass).
template <typename T>
constexpr bool hasFusedForwardOption = requires(T &g) { g.fusedForward; };

template <typename T>
void setBackwardOptions(T &o, bool gradient, bool fusedForward,
                        const std::string &strategy, bool needsGradX, bool needsGradW,
                        int64_t workspaceBytes) {
  if constexpr (hasBackwardOptions<T>) {
    o.gradient = gradient;
    o.strategy = strategy;
    o.needsGradX = needsGradX;
    o.needsGradW = needsGradW;
    o.workspaceBytes = workspaceBytes;
  } else if (gradient) {
    throw std::runtime_error("this build's graph builder has no backward "
                             "(LceGraphOptions::gradient) yet");
  }
  if (fusedForward && !gradient)
    throw py::value_error("fused_forward=True needs gradient=True (it builds the "
                          "fused forward+backward of the gradient function)");
  if constexpr (hasFusedForwardOption<T>) {
    o.fusedForward = fusedForward;
  } else if (fusedForward) {
    throw std::runtime_error("this build's graph builder has no fused "
                             "forward+backward (LceGraphOptions::fusedForward) yet");
  }
}

/// A built graph module as the Python Graph, or a ValueError with the
/// builder's message.
std::unique_ptr<Graph> graphOf(llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> built,
                               const std::string &name) {
  if (!built)
    throw py::value_error(llvm::toString(built.takeError()));
  auto graph = std::make_unique<Graph>();
  graph->module = std::move(*built);
  graph->name = name;
  return graph;
}

/// The C++ preset graph (forward, or the backward function).
std::unique_ptr<Graph> lceGraph(const std::string &name, const std::string &dtype,
                                const std::string &labelType, bool bias,
                                int64_t ignoreIndex, const std::string &reduction,
                                bool gradient, const std::string &strategy,
                                bool needsGradX, bool needsGradW,
                                int64_t workspaceBytes, double logitScale, double softcap,
                                bool fusedForward, bool gradLse) {
  LceGraphOptions o;
  o.gradLse = gradLse;
  o.logitScale = logitScale;
  o.softcap = softcap;
  o.name = name;
  o.dtype = dtype;
  o.labelType = labelType;
  o.bias = bias;
  o.ignoreIndex = ignoreIndex;
  o.reduction = reduction;
  setBackwardOptions(o, gradient, fusedForward, strategy, needsGradX, needsGradW,
                     workspaceBytes);
  std::lock_guard<std::mutex> lock(state().mutex);
  return graphOf(buildLinearCrossEntropyGraph(*state().context, o), name);
}

/// A vocabulary-reduction graph (forward, or its derived backward).
std::unique_ptr<Graph> vocabReduceGraph(const std::string &name, const std::string &dtype,
                                        const std::vector<std::string> &statistics,
                                        const std::string &labelType, bool bias,
                                        bool classWeights, int64_t ignoreIndex,
                                        double logitScale, double softcap, bool gradient,
                                        const std::string &strategy, bool needsGradX,
                                        bool needsGradW, int64_t workspaceBytes,
                                        int64_t labelsPerRow, const std::string &targets,
                                        bool teacher, bool teacherBias, double teacherScale,
                                        double jsdBeta) {
  VocabReduceGraphOptions o;
  o.jsdBeta = jsdBeta;
  o.labelsPerRow = labelsPerRow;
  o.targets = targets;
  o.teacher = teacher;
  o.teacherBias = teacherBias;
  o.teacherScale = teacherScale;
  o.name = name;
  o.dtype = dtype;
  o.statistics = statistics;
  o.labelType = labelType;
  o.bias = bias;
  o.classWeights = classWeights;
  o.ignoreIndex = ignoreIndex;
  o.logitScale = logitScale;
  o.softcap = softcap;
  o.gradient = gradient;
  o.strategy = strategy;
  o.needsGradX = needsGradX;
  o.needsGradW = needsGradW;
  o.workspaceBytes = workspaceBytes;
  std::lock_guard<std::mutex> lock(state().mutex);
  return graphOf(buildVocabReduceGraph(*state().context, o), name);
}

struct CpuOp {
  std::unique_ptr<CpuCompiledOp> op;
  /// The plan's params in order, for `launch` (dtypes are the plan's own).
  std::vector<PlanParam> params;
  /// Index of the "labels" param and the op's ignore_index, for the host-side
  /// range check; -1 when the plan has no labels.
  int labelsIndex = -1;
  int64_t ignoreIndex = -100;
};

std::unique_ptr<CpuOp> compileCpu(Graph &graph, int64_t blockRows,
                                  int64_t vectorWidth, int64_t reduceLanes) {
  CpuTileConfig tile;
  if (blockRows > 0)
    tile.blockRows = blockRows;
  if (vectorWidth > 0)
    tile.vectorWidth = vectorWidth;
  if (reduceLanes > 0)
    tile.reduceLanes = reduceLanes;
  std::string error;
  std::unique_ptr<CpuCompiledOp> compiled;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(state().mutex);
    OwningOpRef<ModuleOp> module = graph.module->clone();
    // Through the kernel cache, as the GPU ops: another process (a restart,
    // a data-parallel rank, a pytest worker) links the object instead of
    // running MLIR and LLVM again. The key holds the CPU target and the
    // compiler's fingerprint, so an entry is never linked for another CPU
    // or by an edited code generator.
    auto result = CpuCompiledOp::compileCached(*module, tile, runtime::KernelCache::global(),
                                               environmentDumpSink());
    if (!result)
      error = llvm::toString(result.takeError());
    else
      compiled = std::move(*result);
  }
  if (!compiled)
    throw std::runtime_error("compiling @" + graph.name + " for the CPU failed: " +
                             error);
  auto out = std::make_unique<CpuOp>();
  out->op = std::move(compiled);
  out->params = out->op->plan().params;
  for (size_t i = 0; i < out->params.size(); ++i)
    if (out->params[i].name == "labels")
      out->labelsIndex = static_cast<int>(i);
  const auto &options = out->op->plan().options;
  if (auto it = options.find("ignore_index"); it != options.end())
    out->ignoreIndex = std::stoll(it->second);
  return out;
}

GpuOp compileGpu(Graph &graph, const std::string &arch, const std::string &tileText) {
  auto tile = TileConfig::parse(tileText);
  if (!tile)
    throw py::value_error("tile: " + llvm::toString(tile.takeError()));
  GpuTarget target{arch, ""};
  if (llvm::Error err = target.validate())
    throw py::value_error(llvm::toString(std::move(err)));
  std::string failure;
  runtime::BundleRef bundle;
  {
    py::gil_scoped_release nogil;
    std::string text;
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      text = printModule(*graph.module);
    }
    std::string key = gpuCacheKey(text, target, *tile);
    auto compile = [&]() -> runtime::Expected<runtime::KernelBundle> {
      std::lock_guard<std::mutex> lock(state().mutex);
      OwningOpRef<ModuleOp> module = graph.module->clone();
      auto compiled = compileToPtx(*module, target, *tile, environmentDumpSink());
      if (!compiled)
        return runtime::makeError(llvm::toString(compiled.takeError()));
      if (compiled->ops.size() != 1)
        return runtime::makeError("the graph lowered to " +
                                  std::to_string(compiled->ops.size()) +
                                  " fused functions; lossjit runs exactly one");
      return makeGpuBundle(compiled->ops.front(), key, runtime::sha256Hex(text));
    };
    auto got = runtime::KernelCache::global().getOrCompile(key, compile);
    if (!got)
      failure = got.errorMessage();
    else
      bundle = *got;
  }
  if (!bundle)
    throw std::runtime_error("compiling @" + graph.name + " for " + arch +
                             " failed: " + failure);
  return GpuOp{bundle};
}

py::list planParams(const LaunchPlan &plan) {
  py::list out;
  for (const PlanParam &p : plan.params)
    out.append(py::make_tuple(p.name, p.dtype, p.shape, p.isOutput));
  return out;
}

void runCpu(const CpuOp &op,
            const std::vector<std::tuple<std::string, uintptr_t, std::string, int64_t>> &buffers,
            int64_t n, int64_t v, int64_t d, unsigned threads, int64_t t) {
  std::map<std::string, HostBuffer> map;
  for (const auto &[name, address, dtype, count] : buffers)
    map[name] = HostBuffer{reinterpret_cast<void *>(address), dtype, count};
  std::string error;
  {
    py::gil_scoped_release nogil;
    if (llvm::Error err = op.op->run(map, Dims{n, v, d, t}, threads))
      error = llvm::toString(std::move(err));
  }
  if (!error.empty())
    throw std::runtime_error(error);
}

/// Every label is ignore_index or in [0, v): checked on the host before a
/// launch, so a bad label is an IndexError rather than a NaN row.
template <typename T>
void checkLabels(const T *labels, int64_t n, int64_t v, int64_t ignoreIndex) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = static_cast<int64_t>(labels[i]);
    if (label != ignoreIndex && (label < 0 || label >= v)) {
      int64_t count = 0;
      for (int64_t j = i; j < n; ++j) {
        int64_t l = static_cast<int64_t>(labels[j]);
        count += l != ignoreIndex && (l < 0 || l >= v);
      }
      throw py::index_error("lossjit: target " + std::to_string(label) +
                            " is out of bounds for " + std::to_string(v) +
                            " classes (" + std::to_string(count) +
                            " such label(s); ignore_index=" +
                            std::to_string(ignoreIndex) + ")");
    }
  }
}

/// The hot path: one (address, elements, dtype) per plan param, in plan
/// order. Every dtype must be the one the kernels were compiled for: a
/// 16-bit buffer handed to f32 kernels would be read past its end.
void launchCpu(const CpuOp &op,
               const std::vector<std::tuple<uintptr_t, int64_t, std::string>> &buffers,
               int64_t n, int64_t v, int64_t d, unsigned threads, bool checkLabelRange,
               int64_t t) {
  if (buffers.size() != op.params.size())
    throw py::value_error("CpuOp.launch: expected " + std::to_string(op.params.size()) +
                          " buffers, got " + std::to_string(buffers.size()));
  for (size_t i = 0; i < buffers.size(); ++i)
    if (std::get<2>(buffers[i]) != op.params[i].dtype)
      throw py::type_error("lossjit: buffer '" + op.params[i].name + "' holds " +
                           std::get<2>(buffers[i]) + " but the kernels were compiled for " +
                           op.params[i].dtype);
  if (checkLabelRange && op.labelsIndex >= 0) {
    const auto &[address, count, dtype] = buffers[op.labelsIndex];
    int64_t rows = std::min(count, n);
    if (rows > 0 && address) {
      if (op.params[op.labelsIndex].dtype == "i32")
        checkLabels(reinterpret_cast<const int32_t *>(address), rows, v, op.ignoreIndex);
      else
        checkLabels(reinterpret_cast<const int64_t *>(address), rows, v, op.ignoreIndex);
    }
  }
  std::map<std::string, HostBuffer> map;
  for (size_t i = 0; i < buffers.size(); ++i)
    map.emplace(op.params[i].name,
                HostBuffer{reinterpret_cast<void *>(std::get<0>(buffers[i])),
                           op.params[i].dtype, std::get<1>(buffers[i])});
  std::string error;
  {
    py::gil_scoped_release nogil;
    if (llvm::Error err = op.op->run(map, Dims{n, v, d, t}, threads))
      error = llvm::toString(std::move(err));
  }
  if (!error.empty())
    throw std::runtime_error(error);
}

} // namespace

void lossjit::python::bindCompiler(py::module_ &m) {
#ifdef LOSSJIT_LLVM_VERSION
  m.attr("llvm_version") = LOSSJIT_LLVM_VERSION;
#else
  m.attr("llvm_version") = "";
#endif
  m.attr("has_backward_builder") = hasBackwardOptions<LceGraphOptions>;
  m.attr("has_fused_forward_backward") = hasFusedForwardOption<LceGraphOptions>;

  py::class_<Graph>(m, "Graph", "A `loss` dialect graph: one function in a module.")
      .def_property_readonly("name", [](const Graph &g) { return g.name; })
      .def("text", &Graph::text, "The graph as MLIR text (for reading and dumps).")
      .def("__str__", &Graph::text);

  py::class_<GraphBuilder>(m, "GraphBuilder",
                           "Builds a `loss` graph op by op; values are integers.")
      .def(py::init<const std::string &>(), py::arg("name") = "loss")
      .def("argument", &GraphBuilder::argument, py::arg("dtype"), py::arg("rank"),
           py::arg("loc") = "",
           "Appends a function argument: a tensor of `rank` dynamic dims.")
      .def("linear", &GraphBuilder::linear, py::arg("x"), py::arg("w"),
           py::arg("bias") = py::none(), py::arg("loc") = "")
      .def("cast", &GraphBuilder::cast, py::arg("value"), py::arg("dtype"),
           py::arg("loc") = "")
      .def("log_softmax", &GraphBuilder::logSoftmax, py::arg("value"),
           py::arg("loc") = "")
      .def("logsumexp", &GraphBuilder::logsumexp, py::arg("value"), py::arg("loc") = "")
      .def("scale", &GraphBuilder::scale, py::arg("value"), py::arg("factor"),
           py::arg("loc") = "", "value · factor (loss.scale): finite, nonzero factor.")
      .def("softcap", &GraphBuilder::softcap, py::arg("value"), py::arg("cap"),
           py::arg("loc") = "", "cap · tanh(value / cap) (loss.softcap): cap > 0.")
      .def("nll", &GraphBuilder::nll, py::arg("logp"), py::arg("labels"),
           py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
           py::arg("loc") = "")
      .def("cross_entropy", &GraphBuilder::crossEntropy, py::arg("logits"),
           py::arg("labels"), py::arg("ignore_index") = -100,
           py::arg("reduction") = "mean", py::arg("loc") = "")
      .def("dtype", &GraphBuilder::dtype, py::arg("value"))
      .def("rank", &GraphBuilder::rank, py::arg("value"))
      .def("finish", &GraphBuilder::finish, py::arg("results"),
           "Returns the values and verifies the graph; the builder is spent.");

  m.def("lce_graph", &lceGraph, py::kw_only(), py::arg("name") = "lce",
        py::arg("dtype"), py::arg("label_type") = "i64", py::arg("bias") = false,
        py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
        py::arg("gradient") = false, py::arg("strategy") = "auto",
        py::arg("needs_grad_x") = true, py::arg("needs_grad_w") = true,
        py::arg("workspace_bytes") = int64_t(64) << 20, py::arg("logit_scale") = 1.0,
        py::arg("softcap") = 0.0, py::arg("fused_forward") = false,
        py::arg("grad_lse") = false,
        "The linear-cross-entropy graph of the C++ preset builder (forward, "
        "or with gradient=True the backward function (with grad_lse=True it "
        "also takes the [N] gradient of lse after grad_loss); with gradient=True and "
        "fused_forward=True the fused forward+backward "
        "(x, w, labels[, bias]) -> (loss, lse, grad_x?, grad_w?, grad_bias?) "
        "with the gradients of grad_loss = 1, reduction mean or sum only); the "
        "logits are softcap(logit_scale · (x·w + b)), softcap = 0 meaning none.");

  m.def("vocab_reduce_graph", &vocabReduceGraph, py::kw_only(),
        py::arg("name") = "vocab_reduce", py::arg("dtype"), py::arg("statistics"),
        py::arg("label_type") = "i64", py::arg("bias") = false,
        py::arg("class_weights") = false, py::arg("ignore_index") = -100,
        py::arg("logit_scale") = 1.0, py::arg("softcap") = 0.0, py::arg("gradient") = false,
        py::arg("strategy") = "auto", py::arg("needs_grad_x") = true,
        py::arg("needs_grad_w") = true, py::arg("workspace_bytes") = int64_t(64) << 20,
        py::arg("labels_per_row") = 0, py::arg("targets") = "", py::arg("teacher") = false,
        py::arg("teacher_bias") = false, py::arg("teacher_scale") = 1.0,
        py::arg("jsd_beta") = 0.5,
        "A loss.vocab_reduce graph (x, w[, labels][, bias][, class_weights]) -> one [N] "
        "f32 tensor per statistic (lse, label_logit, logit_sum, entropy; labels when "
        "label_logit is asked for), or with gradient=True its derived backward, which "
        "also takes the saved statistics and one adjoint per statistic.");

  py::class_<CpuOp>(m, "CpuOp", "A graph compiled for the host by LLVM's JIT.")
      .def_static("compile", &compileCpu, py::arg("graph"), py::kw_only(),
                  py::arg("block_rows") = 0, py::arg("vector_width") = 0,
                  py::arg("reduce_lanes") = 0)
      .def_property_readonly("params", [](const CpuOp &op) { return planParams(op.op->plan()); })
      .def_property_readonly("options", [](const CpuOp &op) { return op.op->plan().options; })
      .def_property_readonly("entry_args", [](const CpuOp &op) { return op.op->plan().entryArgs; })
      .def_property_readonly("op", [](const CpuOp &op) { return op.op->plan().op; })
      .def_property_readonly("tile", [](const CpuOp &op) { return op.op->plan().tile; })
      .def_property_readonly("jit_seconds", [](const CpuOp &op) { return op.op->jitSeconds(); })
      .def_property_readonly(
          "from_cache", [](const CpuOp &op) { return op.op->fromCache(); },
          "True when the kernels were linked from a kernel-cache entry (no compilation).")
      .def_property_readonly("timings",
                             [](const CpuOp &op) {
                               py::list out;
                               for (const auto &t : op.op->timings())
                                 out.append(py::make_tuple(t.name, t.seconds));
                               return out;
                             })
      .def("launch", &launchCpu, py::arg("buffers"), py::arg("n"), py::arg("v"), py::arg("d"),
           py::arg("threads") = 0, py::arg("check_labels") = true, py::arg("t") = 0,
           "The hot path: [(address, elements, dtype)] for every param in "
           "`params` order; each dtype ('f32', 'bf16', 'i64'...) must be the "
           "plan's (TypeError otherwise). With check_labels, every label must "
           "be ignore_index or in [0, V) (IndexError otherwise) before any "
           "kernel runs.")
      .def("run", &runCpu, py::arg("buffers"), py::arg("n"), py::arg("v"), py::arg("d"),
           py::arg("threads") = 0, py::arg("t") = 0,
           "Runs on host buffers [(name, address, dtype, elements)]; the GIL is "
           "released while the kernels run.");

  m.def("compile_gpu", &compileGpu, py::arg("graph"), py::arg("arch"), py::arg("tile") = "auto",
        "Compiles to PTX through the kernel cache (memory, LOSSJIT_KERNEL_PATH, "
        "LOSSJIT_CACHE_DIR) and returns the bundle. tile 'auto' (the default) "
        "gives f16/bf16 ops tensor cores on sm_80+ (wgmma on sm_90a, mma_sync "
        "elsewhere; SIMT for the recompute backward) and the rest SIMT.");
}
