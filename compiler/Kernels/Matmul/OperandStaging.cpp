//===- OperandStaging.cpp - operands into shared memory by cp.async ------===//

#include "compiler/Kernels/Matmul/OperandStaging.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

using namespace mlir;
using namespace lossjit;

bool lossjit::isKMajor(const MatrixOperand &op) {
  assert((!op.kStride || !op.lineStride) && "staged operands are contiguous along k or lines");
  return !op.kStride;
}

Value lossjit::piecesAligned(KernelEmitter &e, const MatrixOperand &op, Value begin) {
  auto multipleOf8 = [&](Value v) {
    return e.cmpI(arith::CmpIPredicate::eq, e.remUI(v, e.index(kStagingPiece)), e.index(0));
  };
  Value outer = isKMajor(op) ? op.lineStride : op.kStride;
  assert(outer && "a staged operand needs an outer stride");
  Value origin = isKMajor(op) ? op.kOrigin : op.lineOrigin;
  return e.andI(multipleOf8(outer), multipleOf8(origin ? e.sub(begin, origin) : begin));
}

void lossjit::clampLine(KernelEmitter &e, Value line, Value limit,
                        SmallVectorImpl<Value> &lines, SmallVectorImpl<Value> &valid) {
  valid.push_back(e.cmpI(arith::CmpIPredicate::ult, line, limit));
  lines.push_back(e.minUI(line, e.sub(limit, e.index(1))));
}

Value lossjit::commitCopies(KernelEmitter &e) {
  auto token = nvgpu::DeviceAsyncTokenType::get(e.builder().getContext());
  return nvgpu::DeviceAsyncCreateGroupOp::create(e.builder(), e.location(), token, ValueRange{});
}

SmallVector<Value, 2> lossjit::ringIndices(KernelEmitter &e, Value ring, Value element) {
  auto type = cast<MemRefType>(ring.getType());
  if (type.getRank() == 1)
    return {element};
  const int64_t row = type.getDimSize(1);
  return {e.divUI(element, e.index(row)), e.remUI(element, e.index(row))};
}

void lossjit::stagePieces(KernelEmitter &e, const MatrixOperand &op, const StageTile &stage,
                          int64_t threads, Value tid, PiecePlacer place) {
  const bool kMajor = stage.kMajor;
  for (int64_t c0 = 0; c0 < stage.pieces; c0 += threads) {
    Value c = e.add(tid, e.index(c0));
    auto body = [&](KernelEmitter &ce) {
      PiecePlace p = place(ce, c);
      // K-major: row is a line and the piece runs along k; MN-major: row
      // is a k and the piece runs along the lines.
      Value line = ce.add(stage.first, kMajor ? p.row : p.along);
      Value k = ce.add(stage.k0, kMajor ? p.along : p.row);
      Value lineOk = ce.cmpI(arith::CmpIPredicate::ult, line, stage.limit);
      Value kOk = ce.cmpI(arith::CmpIPredicate::ult, k, stage.kEnd);
      Value left = kMajor ? ce.select(kOk, ce.sub(stage.kEnd, k), ce.index(0))
                          : ce.select(lineOk, ce.sub(stage.limit, line), ce.index(0));
      Value count = ce.select(kMajor ? lineOk : kOk, ce.minUI(left, ce.index(kStagingPiece)),
                              ce.index(0));
      // Empty copies and masked elements still name an element that
      // exists, 16-byte aligned where a piece starts: K-major the start of
      // the (clamped) line, MN-major the tile's first line at a k that
      // exists — or the operand's first line when the tile lies wholly past
      // the limit (a cluster's padding block: its lines are all zeros).
      Value safeK, safe;
      if (kMajor) {
        safe = op.lineStart(ce, ce.minUI(line, ce.sub(stage.limit, ce.index(1))));
      } else {
        safeK = ce.select(kOk, k, stage.k0);
        Value origin = op.lineOrigin ? op.lineOrigin : ce.index(0);
        Value inside = ce.cmpI(arith::CmpIPredicate::ult, stage.first, stage.limit);
        safe = op.offset(ce, ce.select(inside, stage.first, origin), safeK);
      }
      auto element = [&](KernelEmitter &xe, int64_t j) {
        return kMajor ? op.alongK(xe, safe, xe.add(k, xe.index(j)))
                      : op.offset(xe, xe.add(line, xe.index(j)), safeK);
      };
      ce.ifThenElse(
          stage.aligned,
          [&](KernelEmitter &ae) {
            Value src = ae.select(ae.cmpI(arith::CmpIPredicate::eq, count, ae.index(0)), safe,
                                  element(ae, 0));
            auto token = nvgpu::DeviceAsyncTokenType::get(ae.builder().getContext());
            nvgpu::DeviceAsyncCopyOp::create(ae.builder(), ae.location(), token, stage.ring,
                                             ringIndices(ae, stage.ring, p.dst), op.buffer,
                                             ValueRange{src},
                                             ae.builder().getIndexAttr(kStagingPiece), count,
                                             ae.builder().getUnitAttr());
          },
          [&](KernelEmitter &se) {
            Type elem = cast<MemRefType>(stage.ring.getType()).getElementType();
            Value zero = arith::ConstantOp::create(se.builder(), se.location(),
                                                   se.builder().getFloatAttr(elem, 0.0));
            for (int64_t j = 0; j < kStagingPiece; ++j) {
              Value in = se.cmpI(arith::CmpIPredicate::ult, se.index(j), count);
              Value at = se.select(in, element(se, j), safe);
              Value v = se.select(in, se.load(op.buffer, at), zero);
              memref::StoreOp::create(se.builder(), se.location(), v, stage.ring,
                                      ringIndices(se, stage.ring, se.add(p.dst, se.index(j))));
            }
          });
    };
    if ((c0 + threads) <= stage.pieces)
      body(e);
    else
      e.ifThen(e.cmpI(arith::CmpIPredicate::ult, c, e.index(stage.pieces)), body);
  }
}

KTiles::KTiles(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
               const BlockTile &tile, Value kBegin, Value kEnd, int64_t bk, int64_t stages)
    : kBegin(kBegin), kEnd(kEnd), bk(bk), stages(stages) {
  numK = e.ceilDiv(e.sub(kEnd, kBegin), e.index(bk));
  // Whole 16-byte pieces only when every piece starts 16-byte aligned.
  alignedA = piecesAligned(e, a, isKMajor(a) ? kBegin : tile.rowBegin);
  alignedB = piecesAligned(e, b, isKMajor(b) ? kBegin : tile.colBegin);
}

Value KTiles::fill(KernelEmitter &e, Value kt,
                   function_ref<void(KernelEmitter &, Value, Value)> copy) const {
  Value stage = e.remUI(kt, e.index(stages));
  Value k0 = e.add(kBegin, e.mul(kt, e.index(bk)));
  e.ifThen(e.cmpI(arith::CmpIPredicate::ult, kt, numK),
           [&](KernelEmitter &ie) { copy(ie, stage, k0); });
  return commitCopies(e);
}
