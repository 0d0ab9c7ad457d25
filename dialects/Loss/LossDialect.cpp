//===- LossDialect.cpp - the `loss` dialect ------------------------------===//

#include "dialects/Loss/LossDialect.h"
#include "dialects/Loss/LossOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lossjit::loss;

#include "dialects/Loss/LossDialect.cpp.inc"
#include "dialects/Loss/LossEnums.cpp.inc"
#include "dialects/Loss/LossInterfaces.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Loss/LossAttrs.cpp.inc"

void LossDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Loss/LossOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Loss/LossAttrs.cpp.inc"
      >();
}
