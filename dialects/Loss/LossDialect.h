//===- LossDialect.h - the `loss` dialect -----------------------*- C++ -*-===//

#ifndef LOSSJIT_DIALECTS_LOSS_LOSSDIALECT_H
#define LOSSJIT_DIALECTS_LOSS_LOSSDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "dialects/Loss/LossDialect.h.inc"
#include "dialects/Loss/LossEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Loss/LossAttrs.h.inc"

#endif // LOSSJIT_DIALECTS_LOSS_LOSSDIALECT_H
