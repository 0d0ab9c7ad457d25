//===- WarpMatrix.cpp - PTX fragment layouts of mma.sync and ldmatrix -----===//

#include "testing/simt/WarpMatrix.h"

#include <cassert>

using namespace lossjit::simt;

std::optional<int> MmaConfig::fragmentSizeA() const {
  if (m != 16 || n != 8)
    return std::nullopt;
  if (input == MmaInputType::TF32) {
    if (k == 8)
      return 4;
    if (k == 4)
      return 2;
    return std::nullopt;
  }
  if (k == 16)
    return 8;
  if (k == 8)
    return 4;
  return std::nullopt;
}

std::optional<int> MmaConfig::fragmentSizeB() const {
  if (m != 16 || n != 8)
    return std::nullopt;
  if (input == MmaInputType::TF32) {
    if (k == 8)
      return 2;
    if (k == 4)
      return 1;
    return std::nullopt;
  }
  if (k == 16)
    return 4;
  if (k == 8)
    return 2;
  return std::nullopt;
}

std::pair<int, int> lossjit::simt::mmaElementA(const MmaConfig &config,
                                               int lane, int i) {
  int groupID = lane >> 2, threadInGroup = lane % 4;
  if (config.input == MmaInputType::TF32) {
    if (config.k == 8) {
      // row: groupID for a0, a2; groupID + 8 for a1, a3.
      // col: threadID_in_group for a0, a1; threadID_in_group + 4 for a2, a3.
      int row = (i == 0 || i == 2) ? groupID : groupID + 8;
      int col = (i < 2) ? threadInGroup : threadInGroup + 4;
      return {row, col};
    }
    // m16n8k4: row groupID for a0, groupID + 8 for a1; col threadID_in_group.
    return {i == 0 ? groupID : groupID + 8, threadInGroup};
  }
  if (config.k == 16) {
    // row: groupID for a_i with 0 <= i < 2 || 4 <= i < 6, else groupID + 8.
    // col: threadID_in_group * 2 + (i & 1), + 8 for i >= 4.
    int row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
    int col = threadInGroup * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    return {row, col};
  }
  // m16n8k8 .f16/.bf16: row groupID for a0, a1, else groupID + 8;
  // col threadID_in_group * 2 + (i & 1).
  return {i < 2 ? groupID : groupID + 8, threadInGroup * 2 + (i & 1)};
}

std::pair<int, int> lossjit::simt::mmaElementB(const MmaConfig &config,
                                               int lane, int i) {
  int groupID = lane >> 2, threadInGroup = lane % 4;
  if (config.input == MmaInputType::TF32) {
    if (config.k == 8) // row: threadID_in_group (b0), + 4 (b1); col groupID
      return {threadInGroup + (i == 0 ? 0 : 4), groupID};
    return {threadInGroup, groupID}; // m16n8k4: b0 only
  }
  if (config.k == 16) {
    // row: threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col groupID.
    return {threadInGroup * 2 + (i & 1) + (i >= 2 ? 8 : 0), groupID};
  }
  // m16n8k8 .f16/.bf16: row threadID_in_group * 2 + i; col groupID.
  return {threadInGroup * 2 + i, groupID};
}

std::pair<int, int> lossjit::simt::mmaElementC(const MmaConfig &, int lane,
                                               int i) {
  int groupID = lane >> 2, threadInGroup = lane % 4;
  // row: groupID for c0, c1; groupID + 8 for c2, c3.
  // col: threadID_in_group * 2 + (i & 1).
  return {i < 2 ? groupID : groupID + 8, threadInGroup * 2 + (i & 1)};
}

std::pair<int, int> lossjit::simt::ldmatrixElement(bool transpose, int lane,
                                                   int j) {
  assert(j == 0 || j == 1);
  // Without .trans each lane gets two consecutive elements of one row:
  // lane l holds row l/4, columns 2*(l%4) and 2*(l%4)+1. With .trans the
  // matrix is delivered transposed: the same lane holds column l/4 of rows
  // 2*(l%4) and 2*(l%4)+1.
  int row = lane >> 2, col = 2 * (lane % 4) + j;
  if (transpose)
    return {col, row};
  return {row, col};
}
