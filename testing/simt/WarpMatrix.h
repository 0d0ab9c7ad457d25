//===- WarpMatrix.h - PTX fragment layouts of mma.sync and ldmatrix -*- C++
//-*-===//
//
// Which matrix element each lane of a warp holds in each register of the
// warp-level matrix instructions, transcribed from the PTX ISA ("Matrix
// Fragments for mma.m16n8k16 with floating point type", "... m16n8k8", the
// .tf32 variants, and "Warp-level matrix load instruction: ldmatrix"), with
//   groupID           = laneid >> 2
//   threadID_in_group = laneid % 4.
// This file is deliberately independent of any lowering code: it is what the
// lowering is checked against.
//
// nvgpu's vector operands hold the registers in order: element i of a
// fragment is lane-vector element i in row-major order (vector<4x2xf16> row r
// = the r-th .f16x2 register = elements 2r and 2r+1).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_WARPMATRIX_H
#define LOSSJIT_TESTING_SIMT_WARPMATRIX_H

#include <optional>
#include <utility>

namespace lossjit::simt {

/// Input type of an mma.sync (accumulators are f32 or f16).
enum class MmaInputType { F16, BF16, TF32 };

/// An mma.sync instruction shape with its input type.
struct MmaConfig {
  int m = 16, n = 8, k = 16;
  MmaInputType input = MmaInputType::F16;

  /// Elements per lane of the A, B and C/D fragments, or nullopt for shapes
  /// the interpreter does not model (e.g. integer or sparse mma).
  std::optional<int> fragmentSizeA() const;
  std::optional<int> fragmentSizeB() const;
  int fragmentSizeC() const { return 4; } // every m16n8 shape: c0..c3
};

/// (row, column) in the warp-wide M×K matrix A of element `i` of `lane`'s A
/// fragment. Requires a supported config (fragmentSizeA() has a value).
std::pair<int, int> mmaElementA(const MmaConfig &config, int lane, int i);
/// (row, column) in the K×N matrix B.
std::pair<int, int> mmaElementB(const MmaConfig &config, int lane, int i);
/// (row, column) in the M×N matrices C and D.
std::pair<int, int> mmaElementC(const MmaConfig &config, int lane, int i);

/// ldmatrix .m8n8 .b16: the (row, column) of the 8×8 matrix that `lane`
/// receives as element `j` (0 or 1) of the register loaded for that matrix.
/// Row r of matrix t is read from the address given by lane 8*t + r.
std::pair<int, int> ldmatrixElement(bool transpose, int lane, int j);

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_WARPMATRIX_H
